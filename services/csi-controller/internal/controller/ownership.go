package controller

// signed returns o with its proof for bucket, made with the controller's signing key.
func (c *Controller) signed(bucket string, o ownership) ownership {
	o.proof = c.keys.Sign(o.signed(bucket)...)
	return o
}

// proven reports whether o, read from bucket's tags, carries a proof one of the controller's
// keys made for this bucket and these values: only then did this csi-controller (or one
// sharing its key) create the bucket, for the volume and with the settings the tags say.
//
// Problem: the tags of a bucket are written by anyone allowed to tag it; DeleteVolume acting on
// s3csi's tags alone would delete, and with empty-on-delete empty, any bucket a PV points at.
// Solution: the proof is an HMAC over the bucket name and every other s3csi tag, under a key
// only the csi-controller holds; it is compared in constant time.
// Invariant: a bucket that is not proven is never emptied nor deleted, and never reused by
// CreateVolume unless it is empty (see adopt).
func (c *Controller) proven(bucket string, o ownership) bool {
	return o.owned && c.keys.Verify(o.proof, o.signed(bucket)...)
}
