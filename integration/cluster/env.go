package cluster

import "github.com/s3csi/s3csi/shared/testenv"

// FromEnvironment is the default configuration, with the repository found from the working
// directory and the Kubernetes binaries in the cache hack/kube-bins.sh fills.
func FromEnvironment() (Config, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return Config{}, err
	}
	bins, err := testenv.EnvtestAssetsDir()
	if err != nil {
		return Config{}, err
	}
	return Defaults(root, bins), nil
}
