package fleet

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/store"
)

// A staged dump is a full state dump whose groups travel as SQLite files
// (store.StageOwnGroups) instead of JSON chunks: a joining node copies
// them into its catalog with INSERT … SELECT, without decoding a row,
// which halves what a catch-up of a million groups costs its writer. A
// node asks for one with DumpRequest.Stage; an origin of a build before
// ignores the field and sends JSON chunks, which are folded as before,
// and an origin never sends a staged dump to a node that did not ask.
//
// On the wire a staged file is a run of piece messages (headerDumpPiece
// names the piece's place in the dump's count of messages; the body is
// the file's next bytes, signed as a chunk is) followed by a JSON chunk
// whose Stage names the file: its format, size, SHA-256 and counts. The
// pieces are answered as they are written to disk, the chunk once the
// file is folded, and the receiver takes no piece of a third file while
// two are waiting to be folded, so what is in flight stays bounded
// (about 2 files and dumpWindow pieces). Worker nodes and the end follow
// as JSON chunks, as in any dump.
//
// Files are kept beside the catalog (store.DB.StageDir): the origin's
// as dump-*.db, removed once sent (and, left by a crash, when its dumper
// starts); the receiver's as <origin>-*.db, removed once folded (and,
// left by a crash, when a rebuild of that origin starts again). A
// receiver killed mid-copy has folded some of the origin's groups and
// recorded no rebuild: the rebuild stays owed and runs again from the
// start, and the groups it finds already here go FoldPeerGroups' way,
// under the claim rule, so the part ends the same.

// DumpStage names a staged file sent as the pieces before the chunk.
type DumpStage struct {
	Format int    `json:"format"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Groups int64  `json:"groups"`
	Ranges int64  `json:"ranges"`
}

// headerDumpPiece marks a piece of a staged file; its value is the
// piece's Seq in the dump.
const headerDumpPiece = "Leasehold-Dump-Piece"

// stageGroups and stageRanges bound a staged file: about 7 MB, folded
// in under a second; a group with more ranges than stageRanges goes alone.
// (Variables: tests make them small.)
var (
	stageGroups = 20000
	stageRanges = 4 * stageGroups
)

// stageFoldGroups is how many groups of a staged file a catalog write
// folds: about 0.1 s of the writer on a quiet machine, so holder calls
// queued behind it wait no longer than that.
var stageFoldGroups int64 = 4000

// stageMaxBytes bounds a staged file the receiver takes.
const stageMaxBytes = 1 << 30

// stageUnfolded is how many received files may wait to be folded.
const stageUnfolded = 2

// stageFoldHook, when set (tests), is called after each write of a
// staged file's groups with how many of the dump's groups are folded.
var stageFoldHook func(folded int64)

// writeStaged sends the node's own groups as staged files.
func (d *Dumper) writeStaged(ctx context.Context, w *dumpWriter) error {
	dir := d.db.StageDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var after int64
	for {
		path := filepath.Join(dir, "dump-"+stageNonce()+".db")
		stop := w.keepAlive()
		part, err := d.db.StageOwnGroups(ctx, path, after, stageGroups, stageRanges)
		stop()
		if err != nil {
			return err
		}
		if part.Groups == 0 {
			return nil
		}
		err = w.sendFile(ctx, path, part)
		os.Remove(path)
		if err != nil {
			return err
		}
		after = part.Last
	}
}

// stageNonce names a staged file apart from others.
func stageNonce() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sendFile sends the staged file at path as pieces, then the chunk that
// names it.
func (w *dumpWriter) sendFile(ctx context.Context, path string, part store.StagedPart) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sum := sha256.New()
	var size int64
	buf := make([]byte, w.limit)
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			sum.Write(buf[:n])
			size += int64(n)
			if err := w.sendPiece(ctx, buf[:n]); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	w.stage = &DumpStage{Format: store.StageFormat, Bytes: size, SHA256: hex.EncodeToString(sum.Sum(nil)), Groups: part.Groups, Ranges: part.Ranges}
	err = w.send(ctx, false, "")
	w.stage = nil
	return err
}

// sendPiece sends one piece of a staged file, paced as chunks are.
func (w *dumpWriter) sendPiece(ctx context.Context, data []byte) error {
	for w.seq-w.acked >= dumpWindow {
		if err := w.awaitAck(ctx); err != nil {
			return err
		}
	}
	m := &nats.Msg{Subject: w.reply, Reply: w.acks.Subject, Data: data, Header: nats.Header{}}
	m.Header.Set(headerDumpPiece, strconv.Itoa(w.seq))
	w.id.SignMsg(m)
	if err := w.nc.PublishMsg(m); err != nil {
		return err
	}
	w.seq++
	return nil
}

// removeStaged removes the files in dir whose names start with prefix,
// left by a dump or rebuild that did not end.
func removeStaged(dir, prefix string) {
	names, _ := filepath.Glob(filepath.Join(dir, prefix+"*.db"))
	for _, n := range names {
		os.Remove(n)
	}
}

// stagedFile is a staged file received whole and checked.
type stagedFile struct {
	path string
	info store.StageInfo
}

// stageReceiver writes the pieces of a rebuild's staged files to disk.
type stageReceiver struct {
	dir, origin string
	next        int // the Seq the next message must have
	slots       chan struct{}
	files       int

	f    *os.File // the file being received
	path string
	sum  hash.Hash
	size int64
}

func newStageReceiver(db *store.DB, origin string) (*stageReceiver, error) {
	r := &stageReceiver{dir: db.StageDir(), origin: origin, slots: make(chan struct{}, stageUnfolded)}
	if err := os.MkdirAll(r.dir, 0o700); err != nil {
		return nil, err
	}
	removeStaged(r.dir, origin+"-") // left by a rebuild that did not end
	return r, nil
}

// piece writes a piece to the file being received, opening it (when a
// slot is free) at the first.
func (r *stageReceiver) piece(ctx context.Context, m *nats.Msg) error {
	seq, err := strconv.Atoi(m.Header.Get(headerDumpPiece))
	if err != nil || seq != r.next {
		return fmt.Errorf("a piece of a staged file came as message %q where %d was due", m.Header.Get(headerDumpPiece), r.next)
	}
	r.next++
	if r.f == nil {
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.files++
		r.path = filepath.Join(r.dir, fmt.Sprintf("%s-%s-%d.db", r.origin, stageNonce(), r.files))
		if r.f, err = os.OpenFile(r.path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err != nil {
			<-r.slots
			return err
		}
		r.sum, r.size = sha256.New(), 0
	}
	if r.size += int64(len(m.Data)); r.size > stageMaxBytes {
		return fmt.Errorf("a staged file of more than %d bytes", stageMaxBytes)
	}
	r.sum.Write(m.Data)
	_, err = r.f.Write(m.Data)
	return err
}

// finish ends the file the chunk c names: its size and hash as the chunk
// says, then checked as a staged dump. A chunk of a newer format is left
// to chunkBatches.check to refuse.
func (r *stageReceiver) finish(ctx context.Context, c DumpChunk) (*stagedFile, error) {
	if c.Stage.Format > store.StageFormat {
		r.drop()
		return nil, nil
	}
	if r.f == nil {
		return nil, errors.New("a staged file named with no pieces")
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return nil, err
	}
	if r.size != c.Stage.Bytes || hex.EncodeToString(r.sum.Sum(nil)) != c.Stage.SHA256 {
		return nil, fmt.Errorf("staged file %d: %d bytes received, not the %d bytes and hash it was sent with", r.files, r.size, c.Stage.Bytes)
	}
	info, err := store.CheckStage(ctx, r.path)
	if err != nil {
		return nil, err
	}
	if info.Groups != c.Stage.Groups || info.Ranges != c.Stage.Ranges {
		return nil, fmt.Errorf("staged file %d holds %d groups and %d ranges, sent as %d and %d", r.files, info.Groups, info.Ranges, c.Stage.Groups, c.Stage.Ranges)
	}
	return &stagedFile{path: r.path, info: info}, nil
}

// drop removes the file being received, if any.
func (r *stageReceiver) drop() {
	if r.f != nil {
		r.f.Close()
		r.f = nil
		os.Remove(r.path)
		<-r.slots
	}
}

// done removes the received file f once it is folded (or not wanted).
func (r *stageReceiver) done(f *stagedFile) {
	os.Remove(f.path)
	<-r.slots
}

// close removes what is left at the end of the rebuild.
func (r *stageReceiver) close() {
	r.drop()
	removeStaged(r.dir, r.origin+"-")
}

// foldStaged folds the staged file f of origin's dump into db, a few
// thousand groups a write, telling the origin every dumpBeat that the
// receiver is alive (answering again the message before the chunk), so an
// origin waiting on its window does not give up on a long fold.
func foldStaged(ctx context.Context, db *store.DB, origin string, f *stagedFile, chunk *nats.Msg, seq int, maxAttempts int64, folded *int64) error {
	beat := make(chan struct{})
	defer close(beat)
	if chunk.Reply != "" {
		go func() {
			t := time.NewTicker(dumpBeat)
			defer t.Stop()
			for {
				select {
				case <-beat:
					return
				case <-t.C:
					_ = chunk.Respond([]byte(strconv.Itoa(seq - 1)))
				}
			}
		}()
	}
	s, err := db.AttachStage(ctx, f.path, f.info)
	if err != nil {
		return err
	}
	defer s.Detach(ctx)
	for lo := int64(1); lo <= s.Groups(); lo += stageFoldGroups {
		hi := min(lo+stageFoldGroups-1, s.Groups())
		if err := db.Write(ctx, func(tx *store.Tx) error { return tx.FoldStaged(s, origin, lo, hi, maxAttempts) }); err != nil {
			return err
		}
		*folded += hi - lo + 1
		if stageFoldHook != nil {
			stageFoldHook(*folded)
		}
	}
	return nil
}

// stageError is the error a staged file's failure makes of a rebuild.
func stageError(origin string, err error) error {
	if k := leasehold.KindOf(err); k == leasehold.KindUnprocessable || k == leasehold.KindInvalid {
		return leasehold.Wrap(k, err, "peer %q's staged dump: %v", origin, err)
	}
	if strings.HasPrefix(err.Error(), "peer ") {
		return err
	}
	return leasehold.Wrap(leasehold.KindUnavailable, err, "peer %q's staged dump: %v", origin, err)
}
