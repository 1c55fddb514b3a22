package s3fs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReloadingCredentialsSeeRewrittenProfile(t *testing.T) {
	credFile := filepath.Join(t.TempDir(), "credentials")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", credFile)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "config"))
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(k, "")
		_ = os.Unsetenv(k)
	}
	write := func(secret string) {
		body := "[default]\naws_access_key_id = AK\naws_secret_access_key = " + secret + "\n"
		if err := os.WriteFile(credFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("first-secret")
	r := NewReloadingCredentials("")
	c, err := r.Retrieve(t.Context())
	if err != nil || c.SecretAccessKey != "first-secret" || !c.CanExpire {
		t.Fatalf("first Retrieve = %+v, %v", c.CanExpire, err)
	}
	write("second")
	c, err = r.Retrieve(t.Context())
	if err != nil || c.SecretAccessKey != "second" {
		t.Fatalf("Retrieve after rewrite did not see the new secret (%v)", err)
	}
}
