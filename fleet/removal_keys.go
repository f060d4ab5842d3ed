package fleet

import (
	"log/slog"
	"time"
)

// ringWithdrawer ties a removal to the keyring: a removed member's key is
// withdrawn, so nothing it signs is believed (its events, lives, claims,
// carried writes, and windows signed after its removal), and given back
// when it is approved again.
type ringWithdrawer struct {
	ring *Keyring
	log  *slog.Logger
}

func (w ringWithdrawer) Withdraw(node string, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	if err := w.ring.WithdrawAt(node, at); err != nil {
		w.log.Warn("peers: withdrawing a removed member's key", "peer", node, "err", err)
	}
}

func (w ringWithdrawer) Restore(node string) {
	if err := w.ring.Approve(node, ""); err != nil {
		w.log.Warn("peers: giving an approved member its key back", "peer", node, "err", err)
	}
}
