package source

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mppod"
)

// recordsDirName is the dir, under the driver's plugin dir, of root's records of the requests it
// sent the mounters of kept sources: one file per Mountpoint Pod, named after it. The dir is 0700
// and each file 0600, both root's: no Mountpoint Pod sees them.
const recordsDirName = "records"

// maxRecordSize bounds a record file: a request is a frame (handshake.MaxFrameSize) at most.
const maxRecordSize = 2 * handshake.MaxFrameSize

// record is what a restarted node-agent needs of a kept source: the request root sent its
// mounter, and whether its profile files are the driver's (which it renders again) or a volume's
// (known again at its next publish). It never holds a key.
type record struct {
	Request           *handshake.Request
	DriverCredentials bool
}

// recordFile is record's encoding: the request in its wire form.
type recordFile struct {
	Request           []byte `json:"request"`
	DriverCredentials bool   `json:"driverCredentials"`
}

func recordsDir(kubeletDir string) string {
	return filepath.Join(mppod.PluginDir(kubeletDir), recordsDirName)
}

// recordPath is the record file of Mountpoint Pod mp; it fails unless mp is a Mountpoint Pod name.
func recordPath(kubeletDir, mp string) (string, error) {
	if err := mppod.ValidateName(mp); err != nil {
		return "", fmt.Errorf("record of %q: %w", mp, err)
	}
	return filepath.Join(recordsDir(kubeletDir), mp), nil
}

// writeRecord writes r as mp's record, atomically (a reader sees the old or the new record).
func writeRecord(kubeletDir, mp string, r record) error {
	path, err := recordPath(kubeletDir, mp)
	if err != nil {
		return err
	}
	req, err := proto.Marshal(r.Request)
	if err != nil {
		return fmt.Errorf("record the request of %s: %w", mp, err)
	}
	data, err := json.Marshal(recordFile{Request: req, DriverCredentials: r.DriverCredentials})
	if err != nil {
		return fmt.Errorf("record the request of %s: %w", mp, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("record the request of %s: %w", mp, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("record the request of %s: %w", mp, err)
	}
	tmp, err := os.CreateTemp(dir, "."+mp+".*")
	if err != nil {
		return fmt.Errorf("record the request of %s: %w", mp, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("record the request of %s: %w", mp, err)
	}
	return nil
}

// errNoRecord is the error of readRecord when root recorded nothing for a Mountpoint Pod: its
// source was mounted by a node-agent that kept no records, or the recording failed.
var errNoRecord = errors.New("root has no record of the request it sent this mounter")

// readRecord reads mp's record; it wraps errNoRecord when there is none.
func readRecord(kubeletDir, mp string) (record, error) {
	path, err := recordPath(kubeletDir, mp)
	if err != nil {
		return record{}, err
	}
	f, err := os.Open(path) //nolint:gosec // a Mountpoint Pod name under root's own dir
	if errors.Is(err, os.ErrNotExist) {
		return record{}, errNoRecord
	}
	if err != nil {
		return record{}, fmt.Errorf("read the record of %s: %w", mp, err)
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, maxRecordSize+1))
	if err != nil {
		return record{}, fmt.Errorf("read the record of %s: %w", mp, err)
	}
	if len(data) > maxRecordSize {
		return record{}, fmt.Errorf("read the record of %s: more than %d bytes", mp, maxRecordSize)
	}
	var rf recordFile
	if err := json.Unmarshal(data, &rf); err != nil {
		return record{}, fmt.Errorf("read the record of %s: %w", mp, err)
	}
	req := &handshake.Request{}
	if err := proto.Unmarshal(rf.Request, req); err != nil {
		return record{}, fmt.Errorf("read the record of %s: %w", mp, err)
	}
	if err := handshake.ValidateRequest(req); err != nil {
		return record{}, fmt.Errorf("read the record of %s: %w", mp, err)
	}
	return record{Request: req, DriverCredentials: rf.DriverCredentials}, nil
}

// removeRecord removes mp's record, if any.
func removeRecord(kubeletDir, mp string) error {
	path, err := recordPath(kubeletDir, mp)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the record of %s: %w", mp, err)
	}
	return nil
}

// recordNames lists the Mountpoint Pods that have a record.
func recordNames(kubeletDir string) ([]string, error) {
	entries, err := os.ReadDir(recordsDir(kubeletDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && mppod.ValidateName(e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
