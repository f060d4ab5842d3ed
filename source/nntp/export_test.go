package nntp

// UseXOVER puts c on XOVER from its next overview on, as if the server
// had answered OVER with 500: the tests read the fallback against a
// server that speaks both.
func (c *Client) UseXOVER() {
	c.mu.Lock()
	c.useXOVER = true
	c.mu.Unlock()
}

// UsesXOVER reports whether c has fallen back to XOVER.
func (c *Client) UsesXOVER() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.useXOVER
}

// CompressAnswer is what the server answered the last COMPRESS DEFLATE
// ("206 …"), or why it was not asked ("not offered").
func (c *Client) CompressAnswer() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.compressAnswer
}
