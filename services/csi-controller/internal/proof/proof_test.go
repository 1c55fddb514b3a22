package proof_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/s3csi/s3csi/services/csi-controller/internal/proof"
)

var (
	keyA = bytes.Repeat([]byte("a"), proof.MinKeyLength)
	keyB = bytes.Repeat([]byte("b"), proof.MinKeyLength)
)

func mustKeys(t *testing.T, keys ...[]byte) *proof.Keys {
	t.Helper()
	k, err := proof.NewKeys(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestAProofVerifiesOnlyForItsFieldsAndKeys(t *testing.T) {
	a := mustKeys(t, keyA)
	p := a.Sign("bucket-1", "pvc-1", "true")
	if len(p) != 64 {
		t.Errorf("proof %q is %d characters, want 64 hex digits", p, len(p))
	}
	tests := []struct {
		name   string
		keys   *proof.Keys
		proof  string
		fields []string
		want   bool
	}{
		{"the same fields and key verify", a, p, []string{"bucket-1", "pvc-1", "true"}, true},
		{"another bucket does not verify", a, p, []string{"bucket-2", "pvc-1", "true"}, false},
		{"another field value does not verify", a, p, []string{"bucket-1", "pvc-1", "false"}, false},
		{"fields split differently do not verify", a, p, []string{"bucket-1p", "vc-1", "true"}, false},
		{"a field less does not verify", a, p, []string{"bucket-1", "pvc-1"}, false},
		{"another key does not verify", mustKeys(t, keyB), p, []string{"bucket-1", "pvc-1", "true"}, false},
		{"an earlier key listed after the signing key verifies", mustKeys(t, keyB, keyA), p, []string{"bucket-1", "pvc-1", "true"}, true},
		{"an upper-case copy verifies: hex is case-insensitive", a, strings.ToUpper(p), []string{"bucket-1", "pvc-1", "true"}, true},
		{"an empty proof does not verify", a, "", []string{"bucket-1", "pvc-1", "true"}, false},
		{"a truncated proof does not verify", a, p[:62], []string{"bucket-1", "pvc-1", "true"}, false},
		{"a proof that is not hex does not verify", a, strings.Repeat("z", 64), []string{"bucket-1", "pvc-1", "true"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.keys.Verify(tt.proof, tt.fields...); got != tt.want {
				t.Errorf("Verify() = %v, want %v", got, tt.want)
			}
		})
	}
	if mustKeys(t, keyB, keyA).Sign("x") != mustKeys(t, keyB).Sign("x") {
		t.Error("the first key does not sign")
	}
}

func TestBadKeysAreRefused(t *testing.T) {
	tests := []struct {
		name string
		keys [][]byte
		want string
	}{
		{"no key", nil, "no ownership key"},
		{"a short key", [][]byte{keyA[:31]}, "at least 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := proof.NewKeys(tt.keys...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewKeys() = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestLoadDirReadsAMountedSecret(t *testing.T) {
	write := func(dir, name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The layout kubelet gives a Secret volume: files are links into a hidden versioned dir.
	secret := func(t *testing.T, data map[string]string) string {
		dir := t.TempDir()
		version := filepath.Join(dir, "..2025_01_02_03_04_05.000000001")
		if err := os.Mkdir(version, 0o700); err != nil {
			t.Fatal(err)
		}
		for k, v := range data {
			write(version, k, v)
		}
		if err := os.Symlink(filepath.Base(version), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for k := range data {
			if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}

	t.Run("key signs, trailing newline excluded, and every other file verifies", func(t *testing.T) {
		k, err := proof.LoadDir(secret(t, map[string]string{"key": string(keyB) + "\n", "previous-1": string(keyA)}))
		if err != nil {
			t.Fatalf("LoadDir() = %v", err)
		}
		if k.Sign("x") != mustKeys(t, keyB).Sign("x") {
			t.Error("the file key does not sign, or its newline is part of the key")
		}
		if !k.Verify(mustKeys(t, keyA).Sign("x"), "x") {
			t.Error("the proof of the earlier key does not verify")
		}
	})
	tests := []struct {
		name string
		data map[string]string
		want string
	}{
		{"no key file is refused", map[string]string{"previous-1": string(keyA)}, "key"},
		{"a short key is refused without showing it", map[string]string{"key": "0123456789\n"}, "at least 32"},
		{"a blank key is refused", map[string]string{"key": strings.Repeat(" ", 40)}, "at least 32"},
		{"a short earlier key is refused", map[string]string{"key": string(keyA), "old": "0123456789"}, "old"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := proof.LoadDir(secret(t, tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadDir() = %v, want an error mentioning %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "0123456789") {
				t.Errorf("error %q shows the key", err)
			}
		})
	}
}

func FuzzVerifyNeverAcceptsAnotherKeysProof(f *testing.F) {
	f.Add("bucket", "pvc", "")
	f.Fuzz(func(t *testing.T, bucket, volume, proofText string) {
		a, b := mustKeys(t, keyA), mustKeys(t, keyB)
		if b.Verify(a.Sign(bucket, volume), bucket, volume) {
			t.Fatal("a proof made with another key verified")
		}
		if a.Verify(proofText, bucket, volume) && !strings.EqualFold(proofText, a.Sign(bucket, volume)) {
			t.Fatalf("proof %q verified", proofText)
		}
	})
}
