package synthetic_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/leasehold/leasehold"
	"github.com/leasehold/leasehold/client/synthetic"
)

func TestArticleDeterministic(t *testing.T) {
	t.Parallel()
	a, okA := synthetic.Article("alt.test", 42)
	b, okB := synthetic.Article("alt.test", 42)
	if a != b || okA != okB {
		t.Fatalf("same id, different headers: %+v, %+v", a, b)
	}
	c, _ := synthetic.Article("alt.other", 42)
	if okA && a.MessageID == c.MessageID {
		t.Errorf("two groups share message id %s", a.MessageID)
	}
	missing := 0
	for id := int64(1); id <= 10000; id++ {
		if _, ok := synthetic.Article("alt.test", id); !ok {
			missing++
		}
	}
	// About one in 32 has no article: a real group's holes.
	if missing < 150 || missing > 500 {
		t.Errorf("missing: got %d of 10000, want about 312", missing)
	}
}

func TestWindowIdempotent(t *testing.T) {
	t.Parallel()
	want := synthetic.Uninterrupted("alt.test", 1, 3000)
	got := synthetic.NewWindow("alt.test")
	for id := int64(1); id <= 2000; id++ {
		got.Add(id)
	}
	// A replay after a takeover: ids seen already change nothing.
	for id := int64(1500); id <= 3000; id++ {
		got.Add(id)
	}
	if !got.Equal(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if added, _ := got.Add(10); added {
		t.Error("Add of a seen id reported new")
	}
}

func TestWindowOrderFree(t *testing.T) {
	t.Parallel()
	want := synthetic.Uninterrupted("alt.test", 1, 5000)
	ids := make([]int64, 5000)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	got := synthetic.NewWindow("alt.test")
	for _, id := range ids {
		got.Add(id)
	}
	if !got.Equal(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if len(got.Spans) != 1 || got.Next() != 5001 {
		t.Errorf("spans: got %v, next %d; want one span, next 5001", got.Spans, got.Next())
	}
}

func TestWindowDiffers(t *testing.T) {
	t.Parallel()
	full := synthetic.Uninterrupted("alt.test", 1, 1000)
	tests := []struct {
		name string
		w    *synthetic.Window
	}{
		{"OneMissing", func() *synthetic.Window {
			w := synthetic.NewWindow("alt.test")
			for id := int64(1); id <= 1000; id++ {
				if id != 500 {
					w.Add(id)
				}
			}
			return w
		}()},
		{"OneExtra", synthetic.Uninterrupted("alt.test", 1, 1001)},
		{"OtherGroup", synthetic.Uninterrupted("alt.other", 1, 1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.w.Equal(full) {
				t.Errorf("%v equals %v", tt.w, full)
			}
		})
	}
}

func TestWindowSaveLoad(t *testing.T) {
	t.Parallel()
	w := synthetic.NewWindow("alt.test")
	for _, r := range [][2]int64{{1, 100}, {201, 300}, {150, 160}} {
		for id := r[0]; id <= r[1]; id++ {
			w.Add(id)
		}
	}
	var buf bytes.Buffer
	if err := w.Save(&buf); err != nil {
		t.Fatal(err)
	}
	got := synthetic.NewWindow("alt.test")
	if err := got.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(w) {
		t.Errorf("got %v, want %v", got, w)
	}
	t.Run("OtherGroup", func(t *testing.T) {
		other := synthetic.NewWindow("alt.other")
		if err := other.Load(bytes.NewReader(buf.Bytes())); err == nil {
			t.Error("loaded a window of another group")
		}
	})
	t.Run("Garbage", func(t *testing.T) {
		if err := synthetic.NewWindow("alt.test").Load(bytes.NewReader([]byte("{"))); err == nil {
			t.Error("loaded garbage")
		}
	})
}

func TestSourceIndex(t *testing.T) {
	t.Parallel()
	w := synthetic.NewWindow("alt.test")
	var nexts []int64
	var headers int64
	r := leasehold.Range{ID: 1, Start: 1, End: 200, Next: 1}
	err := synthetic.Source{}.Index(context.Background(), w, r, func(next, h int64) {
		nexts = append(nexts, next)
		headers = h
	})
	if err != nil {
		t.Fatal(err)
	}
	if !w.Equal(synthetic.Uninterrupted("alt.test", 1, 200)) {
		t.Errorf("window: got %v", w)
	}
	if nexts[len(nexts)-1] != 201 || headers != w.Headers {
		t.Errorf("last progress: got next %d headers %d, want 201 and %d", nexts[len(nexts)-1], headers, w.Headers)
	}
	for i := 1; i < len(nexts); i++ {
		if nexts[i] <= nexts[i-1] {
			t.Errorf("progress went backwards: %v", nexts)
		}
	}
	t.Run("Cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		w := synthetic.NewWindow("alt.test")
		err := synthetic.Source{Rate: 10}.Index(ctx, w, leasehold.Range{Start: 1, End: 1000, Next: 1}, nil)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
		if w.Next() > 1000 {
			t.Errorf("indexed the whole range after cancel: %v", w)
		}
	})
}
