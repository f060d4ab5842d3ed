package fleet

import (
	"bytes"
	"encoding/json"

	"github.com/leasehold/leasehold"
)

// A life or a claim is a key-value value, with no headers: its signature
// is in the value, as its last field ("sig"), over the value without it
// and the bucket's subject of the key, and the signer's public key is its
// "key" field. A node of the build before reads such a value as before
// (it ignores the fields).

// kvSubject is the subject a key-value bucket keeps key under: what a
// value's signature covers, so a signed value cannot be moved to another
// key.
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// sigField opens the signature field a signed value ends with.
var sigField = []byte(`,"sig":"`)

// signValue marshals v (a Life or a Claim with its Key set to this
// node's) and appends this node's signature on subject.
func (id *Identity) signValue(subject string, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(b) < 2 || b[len(b)-1] != '}' {
		return nil, leasehold.Errorf(leasehold.KindInternal, "signing a value: %v", err)
	}
	sig := id.sign(subject, b)
	out := make([]byte, 0, len(b)+len(sigField)+len(sig)+2)
	out = append(out, b[:len(b)-1]...)
	out = append(out, sigField...)
	out = append(out, sig...)
	return append(out, '"', '}'), nil
}

// nodeValue is what a Life and a Claim share: the node that wrote it, and
// its key.
type nodeValue struct {
	Node string `json:"node"`
	Key  string `json:"key"`
}

// openValue checks a value signed by signValue on subject and decodes it
// into v (a *Life or *Claim). Errors: *RefusedError when it is not signed
// by the node it names with that node's key; a decoding error.
func (k *Keyring) openValue(subject string, data []byte, v any) error {
	var nv nodeValue
	if err := json.Unmarshal(data, &nv); err != nil {
		return err
	}
	body, sig, ok := splitSigned(data)
	if !ok {
		if nv.Key == "" && k.unsignedBelieved(nv.Node) {
			return json.Unmarshal(data, v) // an earlier release's (AcceptUnsigned)
		}
		return refused(refusedUnsigned, nv.Node, "unsigned")
	}
	if err := k.verify(subject, nv.Node, nv.Key, sig, body); err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// splitSigned parts a value signValue signed into what the signature
// covers and the signature; ok is false for a value with none.
func splitSigned(data []byte) (body []byte, sig string, ok bool) {
	i := bytes.LastIndex(data, sigField)
	if i < 0 || !bytes.HasSuffix(data, []byte(`"}`)) || len(data) < i+len(sigField)+2 {
		return nil, "", false
	}
	body = make([]byte, 0, i+1)
	body = append(append(body, data[:i]...), '}')
	return body, string(data[i+len(sigField) : len(data)-2]), true
}
