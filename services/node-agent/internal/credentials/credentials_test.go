package credentials

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteCreatesPrivateProfileFilesAndRewritesThemInPlace(t *testing.T) {
	comm := t.TempDir()
	files, err := Write(comm, Static{AccessKeyID: "AKIA1", SecretAccessKey: "s3cr3t/1"}, "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(comm, files.CredentialsFile)
	st, err := os.Stat(creds)
	if err != nil || st.Mode().Perm() != 0o640 {
		t.Fatalf("credentials file mode %v, %v; want 0640", st.Mode().Perm(), err)
	}
	if _, err := Write(comm, Static{AccessKeyID: "AKIA2", SecretAccessKey: "s3cr3t/2"}, "eu-west-1"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(creds)
	if err != nil || !strings.Contains(string(b), "AKIA2") || strings.Contains(string(b), "AKIA1") {
		t.Fatalf("rotated credentials file: %q, %v", b, err)
	}
	config, err := os.ReadFile(filepath.Join(comm, files.ConfigFile))
	if err != nil || !strings.Contains(string(config), "[profile "+Profile+"]") || !strings.Contains(string(config), "eu-west-1") {
		t.Fatalf("config file: %q, %v", config, err)
	}
	entries, err := os.ReadDir(filepath.Dir(creds))
	if err != nil || len(entries) != 2 {
		t.Fatalf("credentials dir holds %d entries (temporary files left?), %v", len(entries), err)
	}
}

func TestSecretsAreCheckedAndNeverPrinted(t *testing.T) {
	tests := []struct {
		name    string
		secrets map[string]string
		wantErr bool
	}{
		{name: "valid keys are accepted", secrets: map[string]string{"access_key_id": "AKIA1", "secret_access_key": "a/b+c=d-e"}},
		{name: "UUID-style secret keys are accepted", secrets: map[string]string{"access_key_id": "AK1", "secret_access_key": "123e4567-e89b-12d3-a456-426614174000"}},
		{name: "missing keys are refused", secrets: map[string]string{}, wantErr: true},
		{name: "an access key with punctuation is refused", secrets: map[string]string{"access_key_id": "AK IA", "secret_access_key": "x"}, wantErr: true},
		{name: "a secret with a newline is refused", secrets: map[string]string{"access_key_id": "AK", "secret_access_key": "x\n[other]"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := FromSecrets(tt.secrets)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %t", err, tt.wantErr)
			}
			if err != nil && tt.secrets["secret_access_key"] != "" && strings.Contains(err.Error(), tt.secrets["secret_access_key"]) {
				t.Fatal("the error shows the secret")
			}
			if printed := fmt.Sprintf("%v %+v", s, s); tt.secrets["secret_access_key"] != "" && strings.Contains(printed, tt.secrets["secret_access_key"]) {
				t.Fatalf("printing the credentials shows the secret: %s", printed)
			}
		})
	}
}
