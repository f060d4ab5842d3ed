package web

import "testing"

// TestPublicReason: /readyz's reason keeps its words and loses each URL's
// address and credentials, its scheme and the sentence around it kept.
func TestPublicReason(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"joining the fleet as rz: waiting for NATS at nats://127.0.0.1:19999: no routes":    "joining the fleet as rz: waiting for NATS at nats://…: no routes",
		"waiting for NATS at nats://leasehold:s3cr(e)t'@10.0.0.1:4222,nats://10.0.0.2:4222": "waiting for NATS at nats://…,nats://…",
		"waiting for the fleet's JetStream (nats://127.0.0.1:4222): 0 peers routed":         "waiting for the fleet's JetStream (nats://…): 0 peers routed",
		"NATS at tls://nats.example.internal:4222.":                                         "NATS at tls://….",
		"the data disk is full: 0 bytes free":                                               "the data disk is full: 0 bytes free",
	} {
		if got := publicReason(in); got != want {
			t.Errorf("publicReason(%q)\n = %q\nwant %q", in, got, want)
		}
	}
}
