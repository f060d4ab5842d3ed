package fleet

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leasehold/leasehold"
)

// A node's identity in its fleet is an ed25519 key pair of its own, made
// in its data dir on its first start. The fleet's transport secret lets a
// client onto NATS; it says nothing of who is speaking. What a node
// publishes (its events, its dump chunks, its life and claims, the admin
// writes and asks it carries) is signed with its key, and a peer believes
// it only when the signature holds, the signer is the node the message
// names (the subject's node, the body's origin), and the key is the one
// the peer knows for that name: the one on the operator's roster, or
// without a roster the one it saw first (Keyring).

// IdentityFile is the file in a node's data dir holding its key pair's
// seed (an nkeys user seed, mode 0600). It is never logged; its public
// key is.
const IdentityFile = "fleet.nkey"

// PinsFile is the file in a node's data dir holding the keys it pinned,
// one "NAME PUBKEY" line a member ("NAME PUBKEY withdrawn" for one
// withdrawn).
const PinsFile = "fleet.keys"

// Headers that carry a message's signature. The body stays as it is, so
// a node of the build before reads it as before.
const (
	HeaderSigner    = "Leasehold-Signer"    // the signing node's fleet name
	HeaderSignerKey = "Leasehold-Key"       // its public key (an nkeys user key, "U…")
	HeaderSignature = "Leasehold-Signature" // base64url of the ed25519 signature
)

// Identity is a node's key pair.
type Identity struct {
	name string
	pub  string
	priv ed25519.PrivateKey
}

// Name is the node's fleet name.
func (id *Identity) Name() string { return id.name }

// PublicKey is the node's public key, as a roster lists it.
func (id *Identity) PublicKey() string { return id.pub }

// LoadIdentity reads node name's key pair from dataDir, making one (mode
// 0600) on the first start. The file is opened without following a
// symbolic link, and one other users can read is refused. Errors:
// KindInvalid when the data dir or the file cannot be used.
func LoadIdentity(dataDir, name string) (*Identity, error) {
	path := filepath.Join(dataDir, IdentityFile)
	seed, err := readNoFollow(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := makeIdentityFile(dataDir, path); err != nil {
			return nil, err
		}
		seed, err = readNoFollow(path)
	}
	if err != nil {
		return nil, leasehold.Wrap(leasehold.KindInvalid, err, "reading the node's key %s: %v", path, err)
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		return nil, leasehold.Errorf(leasehold.KindInvalid, "%s holds no usable key: move it away to have a new one made (peers then know this node by its new key only once approved)", path)
	}
	return identityOf(name, kp)
}

// identityOf is name's identity with the key pair kp.
func identityOf(name string, kp nkeys.KeyPair) (*Identity, error) {
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	return &Identity{name: name, pub: pub, priv: ed25519.NewKeyFromSeed(raw)}, nil
}

// readNoFollow reads path, refusing a symbolic link and a file other
// users may read.
func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("it is open to other users (mode %04o): chmod 600 it", st.Mode().Perm())
	}
	return io.ReadAll(io.LimitReader(f, 1<<16))
}

// makeIdentityFile writes a new key pair's seed to path: the file
// appears whole or not at all, and two starts at once on one data dir
// read the same key (the first link wins).
func makeIdentityFile(dataDir, path string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return leasehold.Wrap(leasehold.KindInvalid, err, "data dir %s is not usable: %v", dataDir, err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return err
	}
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	if err := writeNew(path, append(seed, '\n')); err != nil && !errors.Is(err, fs.ErrExist) {
		return leasehold.Wrap(leasehold.KindInvalid, err, "writing %s: %v", path, err)
	}
	return nil
}

// writeNew writes b to a new file at path, mode 0600, through a
// temporary file opened without following links and linked into place;
// fs.ErrExist when path exists.
func writeNew(path string, b []byte) error {
	tmp, err := writeTemp(path, b)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		return err
	}
	syncDir(filepath.Dir(path))
	return nil
}

// writeTemp writes b to a fresh temporary file beside path (O_EXCL,
// O_NOFOLLOW, 0600), synced, and returns its name.
func writeTemp(path string, b []byte) (string, error) {
	var rnd [8]byte
	_, _ = io.ReadFull(rand.Reader, rnd[:])
	tmp := fmt.Sprintf("%s.%x.tmp", path, rnd)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", err
	}
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// ephemeral holds the identities of nodes joined without a data dir
// (tests, embedding programs), one key a name for the life of the
// process, so a node restarted in the process keeps its key.
var ephemeral sync.Map // name → *Identity

// ephemeralIdentity is name's key pair for this process (see ephemeral).
func ephemeralIdentity(name string) *Identity {
	if id, ok := ephemeral.Load(name); ok {
		return id.(*Identity)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		panic(err) // only when the system's random source fails
	}
	id, err := identityOf(name, kp)
	if err != nil {
		panic(err)
	}
	got, _ := ephemeral.LoadOrStore(name, id)
	return got.(*Identity)
}

// signedBytes is what a signature covers: the subject a message is
// published on (a bucket's key, for a value), the signer's name, and the
// body, so a signed body cannot be replayed on another subject or key,
// nor under another name.
func signedBytes(subject, name string, body []byte) []byte {
	b := make([]byte, 0, len(signDomain)+len(subject)+len(name)+len(body)+2)
	b = append(b, signDomain...)
	b = append(b, subject...)
	b = append(b, '\n')
	b = append(b, name...)
	b = append(b, '\n')
	return append(b, body...)
}

const signDomain = "leasehold-signed/1\n"

// sign is the signature of body on subject by this node, base64url.
func (id *Identity) sign(subject string, body []byte) string {
	return base64.RawURLEncoding.EncodeToString(ed25519.Sign(id.priv, signedBytes(subject, id.name, body)))
}

// SignMsg signs m (its subject and body) as this node, in its headers:
// the one place a message this node publishes is signed.
func (id *Identity) SignMsg(m *nats.Msg) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(HeaderSigner, id.name)
	m.Header.Set(HeaderSignerKey, id.pub)
	m.Header.Set(HeaderSignature, id.sign(m.Subject, m.Data))
}

// Why a peer's message or value is refused (the reason label).
const (
	refusedUnsigned     = "unsigned"
	refusedBadSignature = "bad_signature"
	refusedUnknownKey   = "unknown_key"
	refusedWrongOrigin  = "wrong_origin"
)

// RefusedError is a message or value a peer refused: unsigned, badly
// signed, signed by a key not the fleet's for its name, or naming
// another node than its signer.
type RefusedError struct {
	Reason string // one of unsigned, bad_signature, unknown_key, wrong_origin
	Name   string // the name it claims, if any
	Detail string
}

func (e *RefusedError) Error() string {
	if e.Name == "" || strings.Contains(e.Detail, `"`+e.Name+`"`) {
		return e.Detail
	}
	return fmt.Sprintf("%s (claims to be node %q)", e.Detail, e.Name)
}

func refused(reason, name, format string, args ...any) *RefusedError {
	return &RefusedError{Reason: reason, Name: name, Detail: fmt.Sprintf(format, args...)}
}

// Keyring decides which key speaks for which node name. With a roster
// (a file of "NAME PUBKEY" lines, read again when it changes) only its
// members are believed, each by its listed key. Without one, a name's
// key is pinned the first time a validly signed message of that name is
// seen (trust on first join), and a later key for a pinned name is
// refused until the operator approves it (Approve). A withdrawn member
// (Withdraw) is refused under either. Pins are kept in the data dir
// (PinsFile), so they outlive a restart; a keyring without one keeps them
// in memory.
type Keyring struct {
	// acceptUnsigned: see AcceptUnsigned.
	acceptUnsigned bool
	path           string // pins file; "" keeps them in memory
	rosterPath     string
	log            *slog.Logger

	mu      sync.Mutex
	pins    map[string]pinned
	raw     map[string]ed25519.PublicKey // parsed public keys
	roster  map[string]string            // name → key; nil without a roster
	rosterV rosterVersion
	checked time.Time // when the roster file was last looked at
	said    map[string]time.Time

	refusedTotal *prometheus.CounterVec
}

// pinned is a name's key as this node knows it.
type pinned struct {
	key       string
	withdrawn bool
	// withdrawnAt is when the member was removed (in memory only: the
	// removals' bucket says it again at each start), for verifyBefore.
	withdrawnAt time.Time
}

type rosterVersion struct {
	mod  time.Time
	size int64
}

// pinsMax bounds the keys pinned at first sight (membersMax bounds the
// members listed).
const pinsMax = 1024

// rosterCheck is how often the roster file is looked at for a change.
const rosterCheck = time.Second

// NewKeyring returns the keyring kept in dataDir (in memory when dataDir
// is ""), with the roster at rosterPath if not "". Errors: KindInvalid
// when the pins or the roster cannot be read.
func NewKeyring(dataDir, rosterPath string, log *slog.Logger) (*Keyring, error) {
	if log == nil {
		log = slog.Default()
	}
	k := &Keyring{rosterPath: rosterPath, log: log, pins: map[string]pinned{}, raw: map[string]ed25519.PublicKey{}, said: map[string]time.Time{},
		refusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leasehold_peer_messages_refused_total",
			Help: "Peers' messages and values refused: unsigned, badly signed, signed by a key not the fleet's for the name, or naming another node than the signer; by what and why.",
		}, []string{"what", "reason"}),
	}
	if dataDir != "" {
		k.path = filepath.Join(dataDir, PinsFile)
		if err := k.loadPins(); err != nil {
			return nil, err
		}
	}
	if rosterPath != "" {
		k.mu.Lock()
		err := k.readRosterLocked(true)
		k.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return k, nil
}

// memoryKeyring is a keyring kept in memory with no roster: a part made
// alone (tests) pins the keys it sees.
func memoryKeyring(log *slog.Logger) *Keyring {
	k, _ := NewKeyring("", "", log)
	return k
}

// Collectors are the keyring's metrics.
func (k *Keyring) Collectors() []prometheus.Collector { return []prometheus.Collector{k.refusedTotal} }

// loadPins reads the pins file, if there is one.
func (k *Keyring) loadPins() error {
	b, err := readNoFollow(k.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return leasehold.Wrap(leasehold.KindInvalid, err, "reading the fleet's pinned keys %s: %v", k.path, err)
	}
	lines, err := parseKeyLines(b, true)
	if err != nil {
		return leasehold.Wrap(leasehold.KindInvalid, err, "%s: %v", k.path, err)
	}
	for _, l := range lines {
		k.pins[l.name] = pinned{key: l.key, withdrawn: l.withdrawn}
	}
	return nil
}

type keyLine struct {
	name, key string
	withdrawn bool
}

// parseKeyLines reads "NAME PUBKEY" lines (and, with marks, an optional
// third word "withdrawn"); blank lines and lines starting with # are
// skipped.
func parseKeyLines(b []byte, marks bool) ([]keyLine, error) {
	var out []keyLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		ok := len(f) == 2 || (marks && len(f) == 3 && f[2] == "withdrawn")
		if !ok {
			return nil, fmt.Errorf("line %d: want NAME PUBKEY", n)
		}
		if !leasehold.ValidNodeName(f[0]) {
			return nil, fmt.Errorf("line %d: %q is not a node name", n, f[0])
		}
		if !nkeys.IsValidPublicUserKey(f[1]) {
			return nil, fmt.Errorf("line %d: %q is not a node's public key (U…)", n, f[1])
		}
		out = append(out, keyLine{name: f[0], key: f[1], withdrawn: len(f) == 3})
	}
	return out, sc.Err()
}

// readRosterLocked reads the roster again if its file changed (or
// first). A roster that cannot be read keeps the one before (logged);
// first reports it as an error instead. k.mu is held.
func (k *Keyring) readRosterLocked(first bool) error {
	k.checked = time.Now()
	st, err := os.Lstat(k.rosterPath)
	if err == nil && first == false && (rosterVersion{st.ModTime(), st.Size()}) == k.rosterV {
		return nil
	}
	var lines []keyLine
	if err == nil {
		var b []byte
		if b, err = readRoster(k.rosterPath); err == nil {
			lines, err = parseKeyLines(b, false)
		}
	}
	if err != nil {
		err = leasehold.Wrap(leasehold.KindInvalid, err, "reading the fleet roster %s: %v", k.rosterPath, err)
		if first {
			return err
		}
		k.log.Warn("peers: the fleet roster cannot be read; the one read before stands", "roster", k.rosterPath, "err", err)
		return nil
	}
	roster := map[string]string{}
	for _, l := range lines {
		roster[l.name] = l.key
	}
	k.roster, k.rosterV = roster, rosterVersion{st.ModTime(), st.Size()}
	if !first {
		k.log.Info("peers: the fleet roster changed", "roster", k.rosterPath, "members", len(roster))
	}
	return nil
}

// readRoster reads the roster file, refusing a link; unlike the node's
// key it may be readable by others (it holds public keys only).
func readRoster(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// believe reports whether key speaks for name: on the roster if there is
// one, else pinned to name (pinning it if name has none yet). It is
// asked only once a signature by key verified.
func (k *Keyring) believe(name, key string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rosterPath != "" && time.Since(k.checked) >= rosterCheck {
		_ = k.readRosterLocked(false)
	}
	p, ok := k.pins[name]
	if ok && p.withdrawn {
		return refused(refusedUnknownKey, name, "node %q was withdrawn from the fleet", name)
	}
	if k.roster != nil {
		if want, listed := k.roster[name]; !listed || want != key {
			return refused(refusedUnknownKey, name, "node %q with key %s is not on the fleet roster", name, key)
		}
		return nil
	}
	if ok {
		if p.key != key {
			return refused(refusedUnknownKey, name, "node %q signed with key %s, not the key pinned for it (%s): approve the new key if the node was made anew", name, key, p.key)
		}
		return nil
	}
	if len(k.pins) >= pinsMax {
		// A holder of the transport secret may make up names without
		// end; the pins stay bounded.
		return refused(refusedUnknownKey, name, "node %q is new and %d keys are pinned already: approve it or use a roster", name, len(k.pins))
	}
	k.pins[name] = pinned{key: key}
	if err := k.savePinsLocked(); err != nil {
		k.log.Warn("peers: recording a pinned key", "node", name, "err", err)
	}
	k.log.Info("peers: a node's key pinned at first sight", "node", name, "key", key)
	return nil
}

// savePinsLocked writes the pins file anew (none in memory). k.mu is held.
func (k *Keyring) savePinsLocked() error {
	if k.path == "" {
		return nil
	}
	names := make([]string, 0, len(k.pins))
	for n := range k.pins {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.WriteString("# Fleet members' public keys as this node pinned them: NAME PUBKEY [withdrawn]\n")
	for _, n := range names {
		p := k.pins[n]
		fmt.Fprintf(&b, "%s %s", n, p.key)
		if p.withdrawn {
			b.WriteString(" withdrawn")
		}
		b.WriteByte('\n')
	}
	tmp, err := writeTemp(k.path, b.Bytes())
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, k.path); err != nil {
		os.Remove(tmp)
		return err
	}
	syncDir(filepath.Dir(k.path))
	return nil
}

// own pins this node's own key under its name, in place of any pinned
// before (a data dir whose key was made anew): no one else can have its
// own name pinned to another key here.
func (k *Keyring) own(id *Identity) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.pins[id.name]; ok && p.key == id.pub && !p.withdrawn {
		return
	}
	k.pins[id.name] = pinned{key: id.pub}
	if err := k.savePinsLocked(); err != nil {
		k.log.Warn("peers: recording this node's own key", "err", err)
	}
}

// Withdraw refuses name's messages and values from now on, whatever key
// signs them (until Approve): for a member removed from the fleet. Its
// pinned key is kept, so approving it again restores that key. Errors:
// KindInvalid for a bad name; KindInternal when the pins file cannot be
// written (the withdrawal holds in memory).
func (k *Keyring) Withdraw(name string) error { return k.WithdrawAt(name, time.Now()) }

// WithdrawAt is Withdraw for a member removed at at: what it signed
// before then and says so in the signed part (a window's time) stays
// good (verifyBefore).
func (k *Keyring) WithdrawAt(name string, at time.Time) error {
	if !leasehold.ValidNodeName(name) {
		return leasehold.Errorf(leasehold.KindInvalid, "%q is not a node name", name)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.pins[name]
	p.withdrawn, p.withdrawnAt = true, at
	k.pins[name] = p
	if err := k.savePinsLocked(); err != nil {
		return leasehold.Wrap(leasehold.KindInternal, err, "recording node %q withdrawn: %v", name, err)
	}
	k.log.Info("peers: a node withdrawn from the fleet: its messages are refused", "node", name)
	return nil
}

// Approve believes name again: with key "" its pinned key (or, if it
// has none, the next key it signs with); with a key, that key from now
// on, in place of any pinned before (a node made anew on an empty data
// dir). A roster, if used, still decides. Errors: KindInvalid for a bad
// name or key; KindInternal when the pins file cannot be written.
func (k *Keyring) Approve(name, key string) error {
	if !leasehold.ValidNodeName(name) {
		return leasehold.Errorf(leasehold.KindInvalid, "%q is not a node name", name)
	}
	if key != "" && !nkeys.IsValidPublicUserKey(key) {
		return leasehold.Errorf(leasehold.KindInvalid, "%q is not a node's public key (U…)", key)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.pins[name]
	switch {
	case key != "":
		k.pins[name] = pinned{key: key}
	case ok && p.key != "":
		k.pins[name] = pinned{key: p.key}
	default:
		delete(k.pins, name)
	}
	if err := k.savePinsLocked(); err != nil {
		return leasehold.Wrap(leasehold.KindInternal, err, "recording node %q approved: %v", name, err)
	}
	k.log.Info("peers: a node approved in the fleet", "node", name, "key", cmp.Or(key, p.key, "the next it signs with"))
	return nil
}

// Key is name's key as this node believes it: the roster's, else the
// pinned one; withdrawn reports a withdrawn member.
func (k *Keyring) Key(name string) (key string, withdrawn bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p := k.pins[name]
	if k.roster != nil {
		return k.roster[name], p.withdrawn
	}
	return p.key, p.withdrawn
}

// verify checks a signature (sig, base64url) by key over body on
// subject in name's name, and that key speaks for name.
func (k *Keyring) verify(subject, name, key, sig string, body []byte) error {
	if sig == "" && key == "" && k.unsignedBelieved(name) {
		return nil
	}
	if sig == "" || key == "" || name == "" {
		return refused(refusedUnsigned, name, "unsigned")
	}
	pub, err := k.publicKey(key)
	if err != nil {
		return refused(refusedBadSignature, name, "signer's key %q is not a public key", key)
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !ed25519.Verify(pub, signedBytes(subject, name, body), raw) {
		return refused(refusedBadSignature, name, "the signature does not hold")
	}
	return k.believe(name, key)
}

// verifyBefore is verify for what says, in its signed part, that it was
// made at at: a member removed from the fleet after at is still believed
// for it, with its pinned key. A window a member replicated before its
// removal is what the node taking its group over resumes from; one it
// signed after is refused.
func (k *Keyring) verifyBefore(subject, name, key, sig string, body []byte, at time.Time) error {
	err := k.verify(subject, name, key, sig, body)
	var r *RefusedError
	if err == nil || !errors.As(err, &r) || r.Reason != refusedUnknownKey || sig == "" {
		return err
	}
	// An unknown-key refusal comes only after the signature held.
	k.mu.Lock()
	p, ok := k.pins[name]
	k.mu.Unlock()
	if ok && p.withdrawn && p.key == key && !p.withdrawnAt.IsZero() && !at.IsZero() && at.Before(p.withdrawnAt) {
		return nil
	}
	return err
}

// publicKey parses key, cached.
func (k *Keyring) publicKey(key string) (ed25519.PublicKey, error) {
	k.mu.Lock()
	pub, ok := k.raw[key]
	k.mu.Unlock()
	if ok {
		return pub, nil
	}
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(key))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, cmp.Or(err, errors.New("wrong size"))
	}
	pub = ed25519.PublicKey(raw)
	k.mu.Lock()
	if len(k.raw) > 4096 {
		clear(k.raw) // bounded: a flood of made-up keys cannot grow it
	}
	k.raw[key] = pub
	k.mu.Unlock()
	return pub, nil
}

// VerifyMsg checks m's signature (SignMsg) and returns the signer's
// name. claimed is the node the message says it is from (its subject's,
// its sender header's), which an unsigned message is taken to be from
// while the keyring believes unsigned messages (AcceptUnsigned).
// Errors: *RefusedError.
func (k *Keyring) VerifyMsg(subject string, h nats.Header, body []byte, claimed string) (string, error) {
	name, key, sig := h.Get(HeaderSigner), h.Get(HeaderSignerKey), h.Get(HeaderSignature)
	if name == "" && key == "" && sig == "" {
		name = claimed
	}
	if err := k.verify(subject, name, key, sig, body); err != nil {
		return "", err
	}
	return name, nil
}

// refuse counts a refused message or value (what: event, dump, life,
// claim, admin) and logs it, at most once every 10 s for each what and
// reason, with how many were refused meanwhile.
func (k *Keyring) refuse(what, subject string, err error) {
	reason := refusedBadSignature
	var r *RefusedError
	if errors.As(err, &r) {
		reason = r.Reason
	}
	k.refusedTotal.WithLabelValues(what, reason).Inc()
	key := what + "/" + reason
	k.mu.Lock()
	last := k.said[key]
	due := time.Since(last) >= 10*time.Second
	if due {
		k.said[key] = time.Now()
	}
	k.mu.Unlock()
	if due {
		k.log.Warn("peers: refused a message not signed by the node it names", "what", what, "subject", subject, "reason", reason, "err", err)
	}
}

// AcceptUnsigned makes k believe, for as long as a fleet has nodes of a
// release that signs nothing (a rolling upgrade from it), an unsigned
// message or value as the node it names: the earlier release's events,
// lives, claims, windows and dumps are then taken as before, and so are
// those a node wrote before its own upgrade (its claims and replicated
// windows stay in the buckets after it starts signing). A signed one is
// checked as ever; a roster believes nothing unsigned, nor is a withdrawn
// name believed. Off by default: while it is on, a holder of the
// transport secret can speak as any node, as before nodes signed.
func (k *Keyring) AcceptUnsigned(on bool) {
	k.mu.Lock()
	k.acceptUnsigned = on
	k.mu.Unlock()
}

// unsignedBelieved reports whether an unsigned message or value in name's
// name is believed (AcceptUnsigned), counting it.
func (k *Keyring) unsignedBelieved(name string) bool {
	if !leasehold.ValidNodeName(name) {
		return false
	}
	k.mu.Lock()
	p := k.pins[name]
	ok := k.acceptUnsigned && k.roster == nil && k.rosterPath == "" && !p.withdrawn
	k.mu.Unlock()
	if ok {
		k.refusedTotal.WithLabelValues("any", "unsigned_believed").Inc()
	}
	return ok
}
