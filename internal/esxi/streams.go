package esxi

import "context"

// StreamClients returns n clients of this host for the streams of one bulk
// read: this client first, then n-1 others, each on an SSH connection of
// its own, because a host's sshd (and this side's SSH transport) encrypts
// a connection on one core: several connections are what reads faster
// than one core can encrypt. The others connect on first use and are
// closed with this client. They share this client's session limit, so
// all of them together never run more than max_sessions commands at once,
// and an authentication or host key failure of this client stops them
// before they try to log in.
func (c *Client) StreamClients(n int) []*Client {
	out := []*Client{c}
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.streams) < n-1 && !c.closed {
		c.streams = append(c.streams, &Client{
			cfg: c.cfg, signer: c.signer, logf: c.logf, sem: c.sem, parent: c,
			pollInterval: c.pollInterval, rebootWindow: c.rebootWindow, hostKeyAlgos: c.hostKeyAlgos,
		})
	}
	for i := 0; i < n-1 && i < len(c.streams); i++ {
		out = append(out, c.streams[i])
	}
	return out
}

// parentFatal is the sticky failure of the client a stream client belongs
// to: a stream never logs in where its parent was refused.
func (c *Client) parentFatal(ctx context.Context) error {
	if c.parent == nil {
		return nil
	}
	// The parent connects first, so that a refused login is learned once.
	if _, err := c.parent.connection(ctx); err != nil {
		return err
	}
	return nil
}

// closeStreams closes the stream clients (c.mu held).
func (c *Client) closeStreams() {
	for _, s := range c.streams {
		_ = s.Close()
	}
	c.streams = nil
}
