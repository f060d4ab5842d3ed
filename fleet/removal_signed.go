package fleet

import (
	"encoding/json"
	"fmt"
	"time"
)

// Signed removals. A removal makes every node refuse a member's messages
// and the member itself leave the fleet, and an approval gives its key
// back: written by whoever holds the fleet's transport secret, they
// would let that holder turn any member out, or let a removed one back
// in. So each is a value signed by the node it was made at (Removal.By),
// as lives and claims are, and believed only with that node's key; an
// approval is a signed write too (Approved), not a delete, which could
// carry no signature. A removal signed by a node removed since is still
// believed if made before its signer's removal (Keyring.verifyBefore),
// so removing the remover does not undo what it did.

// sealRemoval is rm, made at this node, signed for its key in
// RemovedBucket.
func (r *Removals) sealRemoval(rm Removal) ([]byte, error) {
	rm.By = r.self
	if r.id == nil {
		return json.Marshal(rm)
	}
	rm.Key = r.id.PublicKey()
	return r.id.signValue(kvSubject(RemovedBucket, rm.Node), rm)
}

// openRemoval reads node's removal (or approval) from data, as signed by
// the node it was made at. Errors: *RefusedError when it is not signed
// by that node with a key the fleet believes for it; a removal of
// another node than its key's, or unreadable.
func (r *Removals) openRemoval(node string, data []byte) (Removal, error) {
	var rm Removal
	if err := json.Unmarshal(data, &rm); err != nil {
		return Removal{}, err
	}
	if rm.Node != node {
		return Removal{}, fmt.Errorf("the removal under %q names node %q", node, rm.Node)
	}
	if r.ring == nil {
		return rm, nil
	}
	body, sig, ok := splitSigned(data)
	if !ok {
		if rm.Key == "" && r.ring.unsignedBelieved(rm.By) {
			return rm, nil
		}
		return Removal{}, refused(refusedUnsigned, rm.By, "unsigned")
	}
	if err := r.ring.verifyBefore(kvSubject(RemovedBucket, node), rm.By, rm.Key, sig, body, rm.At); err != nil {
		return Removal{}, err
	}
	return rm, nil
}

// refuseRemoval counts and logs a removal or approval not believed; what
// stood before it stands.
func (r *Removals) refuseRemoval(node string, err error) {
	if r.ring != nil {
		r.ring.refuse("removal", kvSubject(RemovedBucket, node), err)
		return
	}
	r.log.Warn("peers: refused a removal", "peer", node, "err", err)
}

// removalNow is a removal (or an approval) of node made now at this node.
func (r *Removals) removalNow(node string, approved bool) ([]byte, error) {
	return r.sealRemoval(Removal{Node: node, At: time.Now().UTC(), Approved: approved})
}
