// Package audit reads the s3csi audit trail for kubectl s3csi: the selection of events (by node,
// pod, PersistentVolume, type, time and sequence), their rendering as a table, JSON or YAML,
// and the "why is my pod stuck" view of one pod's mount path.
package audit

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/s3csi/s3csi/shared/events"
	"github.com/s3csi/s3csi/shared/kubenames"
)

// Selection is what the user asked to see. The zero value selects every retained event.
type Selection struct {
	// Node selects the events about this node; cluster-scoped events (volume.created and
	// volume.deleted) are about no node and are left out.
	Node string
	// Pod is "namespace/name", "name" (in Namespace) or a pod UID: the events of that pod's
	// mount path and of its Mountpoint Pods (see PodTracker).
	Pod string
	// Namespace is the namespace of a Pod given as a bare name.
	Namespace string
	// PV selects the events about this PersistentVolume (by name, or its volume handle once an
	// event has tied the two).
	PV string
	// Types selects event types, by full name (io.s3csi.mount.failed.v1) or short name
	// (mount.failed); every type when empty.
	Types []string
	// Since selects the events stored in the last Since (at most one of Since and FromSeq).
	Since time.Duration
	// FromSeq and UntilSeq bound the stream sequences (0: no bound).
	FromSeq, UntilSeq uint64
}

// ShortType is t without its io.s3csi. prefix and version suffix, e.g. attachment.assigned.
func ShortType(t events.Type) string {
	s := strings.TrimPrefix(string(t), "io.s3csi.")
	if i := strings.LastIndex(s, ".v"); i > 0 {
		s = s[:i]
	}
	return s
}

// ParseType accepts a full or short type name of the catalog.
func ParseType(name string) (events.Type, error) {
	for _, t := range events.Types() {
		if name == string(t) || name == ShortType(t) {
			return t, nil
		}
	}
	names := make([]string, 0, len(events.Types()))
	for _, t := range events.Types() {
		names = append(names, ShortType(t))
	}
	sort.Strings(names)
	return "", fmt.Errorf("unknown event type %q: want one of %s", name, strings.Join(names, ", "))
}

// PodRef is a parsed Selection.Pod.
type PodRef struct {
	Namespace, Name, UID string
}

// String is namespace/name, or the UID.
func (p PodRef) String() string {
	if p.Name != "" {
		return p.Namespace + "/" + p.Name
	}
	return p.UID
}

// ParsePod reads "namespace/name", a pod UID, or a bare name in namespace.
func ParsePod(s, namespace string) (PodRef, error) {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		if err := kubenames.Namespace(ns); err != nil {
			return PodRef{}, fmt.Errorf("--pod %q: namespace: %w", s, err)
		}
		if err := kubenames.Pod(name); err != nil {
			return PodRef{}, fmt.Errorf("--pod %q: name: %w", s, err)
		}
		return PodRef{Namespace: ns, Name: name}, nil
	}
	if kubenames.UID(s) == nil {
		return PodRef{UID: s}, nil
	}
	if err := kubenames.Pod(s); err != nil {
		return PodRef{}, fmt.Errorf("--pod %q: want namespace/name, a name or a pod UID: %w", s, err)
	}
	if namespace == "" {
		namespace = "default"
	}
	return PodRef{Namespace: namespace, Name: s}, nil
}

// Validate reports every invalid part of the selection, naming the flag to fix.
func (s Selection) Validate() error {
	var errs []error
	if s.Node != "" && !events.ValidNode(s.Node) {
		errs = append(errs, fmt.Errorf("--node %q is not a node name", s.Node))
	}
	if s.Pod != "" {
		if _, err := ParsePod(s.Pod, s.Namespace); err != nil {
			errs = append(errs, err)
		}
	}
	if s.PV != "" {
		if err := kubenames.PV(s.PV); err != nil {
			errs = append(errs, fmt.Errorf("--pv %q: %w", s.PV, err))
		}
	}
	for _, t := range s.Types {
		if _, err := ParseType(t); err != nil {
			errs = append(errs, fmt.Errorf("--type: %w", err))
		}
	}
	if s.Since < 0 {
		errs = append(errs, fmt.Errorf("--since %s is negative", s.Since))
	}
	if s.Since > 0 && s.FromSeq > 0 {
		errs = append(errs, errors.New("--since and --from-seq: give one start, not both"))
	}
	if s.UntilSeq > 0 && s.UntilSeq < s.FromSeq {
		errs = append(errs, fmt.Errorf("--until-seq %d is before --from-seq %d", s.UntilSeq, s.FromSeq))
	}
	return errors.Join(errs...)
}

// Subjects are the filter subjects of the selected types and node (the server-side part of
// the selection): with a node, only node-scoped types. Without types they are wildcards, so
// that a message of a type outside the catalog is read too (and shown as invalid).
func (s Selection) Subjects() []string {
	if len(s.Types) == 0 {
		if s.Node == "" {
			return nil
		}
		return []string{events.SubjectPrefix + ".*.*." + events.NodeToken(s.Node)}
	}
	var types []events.Type
	for _, name := range s.Types {
		t, err := ParseType(name)
		if err == nil {
			types = append(types, t)
		}
	}
	if s.Node == "" {
		return events.NodeSubjects("", types...)
	}
	var scoped []events.Type
	for _, t := range types {
		if t.NodeScoped() {
			scoped = append(scoped, t)
		}
	}
	if len(scoped) == 0 {
		return []string{"-"} // matches no subject: the selected types are about no node
	}
	return events.NodeSubjects(s.Node, scoped...)
}

// ReadOptions are the stream bounds of the selection, now being the current time.
func (s Selection) ReadOptions(now time.Time) events.ReadOptions {
	o := events.ReadOptions{StartSeq: s.FromSeq, EndSeq: s.UntilSeq, Subjects: s.Subjects()}
	if s.Since > 0 {
		o.StartTime = now.Add(-s.Since)
	}
	return o
}
