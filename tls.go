package leasehold

import "crypto/tls"

// ServerCipherSuites are the suites every TLS server leasehold runs (the
// HTTPS listener of --tls-cert, the embedded NATS server's client port
// and routes of --nats-tls-*) offers in TLS 1.2: ECDHE for forward
// secrecy, with AES-GCM or ChaCha20-Poly1305 only. Go's defaults add
// the CBC suites, which TLS 1.2 clients can still pick and which have a
// history of padding and timing attacks; every client leasehold has, and
// any TLS 1.2 client from the last decade, speaks one of these. TLS 1.3
// is not configured by it: Go offers only AEAD suites there.
func ServerCipherSuites() []uint16 {
	return []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
	}
}
