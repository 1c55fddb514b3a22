package mounter

import (
	"errors"
	"fmt"

	"github.com/s3csi/s3csi/shared/handshake"
	"github.com/s3csi/s3csi/shared/mountopts"
)

// checkPolicy applies the node-agent's mount-option policy to a mount request: its arguments
// and its environment.
//
// Problem: the node-agent refuses mount options outside its allow-list (an --endpoint-url
// that sends the credentials elsewhere, a --profile, a --ca-bundle), but the mounter takes any
// request that reaches its socket; a compromised peer there could ask for what the policy
// refuses.
// Solution: the mounter applies the same allow-list (shared/mountopts, one definition for
// both) to every request before an engine sees it, and refuses it with the reason otherwise.
// Invariant: no engine starts with an argument or environment variable the policy refuses.
func checkPolicy(req *handshake.Request) error {
	var errs []error
	if err := mountopts.CheckArgs(req.GetArgs()); err != nil {
		errs = append(errs, err)
	}
	if err := mountopts.CheckEnv(req.GetEnv()); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("refuse mount request: the driver's mount-option policy does not allow it: %w", err)
	}
	return nil
}
