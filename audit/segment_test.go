package audit

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func decodeAll(seg []byte) ([][]byte, error) {
	var out [][]byte
	err := DecodeSegment(seg, func(r []byte) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

func TestSegmentRoundTrip(t *testing.T) {
	recs := [][]byte{[]byte(`{"a":1}`), []byte("x"), bytes.Repeat([]byte("y"), 70000)}
	seg, err := EncodeSegment(recs)
	if err != nil {
		t.Fatal(err)
	}
	// The literal frame: magic, version, count, then length + bytes.
	if want := "SOSA\x01\x00\x00\x00\x03\x00\x00\x00\x07{\"a\":1}\x00\x00\x00\x01x\x00\x01\x11\x70"; !bytes.HasPrefix(seg, []byte(want)) {
		t.Fatalf("segment starts %q, want %q", seg[:len(want)], want)
	}
	if len(seg) != SegmentHeaderSize+3*SegmentRecordOverhead+7+1+70000 {
		t.Fatalf("segment of %d bytes", len(seg))
	}
	got, err := decodeAll(seg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, recs, bytes.Equal) {
		t.Fatal("records differ after a round trip")
	}
	if n, err := SegmentCount(seg); n != 3 || err != nil {
		t.Fatalf("SegmentCount = %d, %v", n, err)
	}
	// fn's error stops the walk and comes back unchanged.
	stop := errors.New("stop")
	calls := 0
	if err := DecodeSegment(seg, func([]byte) error { calls++; return stop }); err != stop || calls != 1 {
		t.Fatalf("DecodeSegment = %v after %d calls", err, calls)
	}
	if _, err := EncodeSegment(nil); err == nil {
		t.Error("empty segment encoded")
	}
	if _, err := EncodeSegment([][]byte{[]byte("a"), nil}); err == nil {
		t.Error("empty record encoded")
	}
}

// A malformed or forged segment yields no record at all, whatever it
// claims.
func TestSegmentMalformed(t *testing.T) {
	good, _ := EncodeSegment([][]byte{[]byte("ab"), []byte("c")})
	for _, tc := range []struct {
		name string
		seg  []byte
	}{
		{"empty", nil},
		{"short header", []byte("SOSA\x01\x00")},
		{"bad magic", append([]byte("SOSB"), good[4:]...)},
		{"version 2", append([]byte("SOSA\x02"), good[5:]...)},
		{"zero count", []byte("SOSA\x01\x00\x00\x00\x00")},
		{"count beyond the bytes", []byte("SOSA\x01\xff\xff\xff\xff\x00\x00\x00\x01a")},
		{"count one too many", append([]byte("SOSA\x01\x00\x00\x00\x03"), good[9:]...)},
		{"count one too few", append([]byte("SOSA\x01\x00\x00\x00\x01"), good[9:]...)},
		{"length beyond the bytes", []byte("SOSA\x01\x00\x00\x00\x01\x7f\xff\xff\xffab")},
		{"zero length", []byte("SOSA\x01\x00\x00\x00\x01\x00\x00\x00\x00a")},
		{"truncated length", []byte("SOSA\x01\x00\x00\x00\x02\x00\x00\x00\x01a\x00\x00")},
		{"truncated record", good[:len(good)-1]},
		{"trailing byte", append(slices.Clone(good), 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeAll(tc.seg)
			if !errors.Is(err, ErrBadSegment) || got != nil {
				t.Fatalf("DecodeSegment = %d records, %v; want none and ErrBadSegment", len(got), err)
			}
		})
	}
}

func FuzzDecodeSegment(f *testing.F) {
	good, _ := EncodeSegment([][]byte{[]byte(`{"id":"x"}`), []byte("c")})
	f.Add(good)
	f.Add([]byte("SOSA\x01\xff\xff\xff\xff\x00\x00\x00\x01a"))
	f.Add([]byte("SOSA\x01\x00\x00\x00\x01\x7f\xff\xff\xffab"))
	f.Fuzz(func(t *testing.T, seg []byte) {
		var total, n int
		err := DecodeSegment(seg, func(r []byte) error {
			if len(r) == 0 {
				t.Fatal("empty record")
			}
			total += len(r)
			n++
			return nil
		})
		if err != nil {
			if n != 0 {
				t.Fatalf("%d records delivered before %v", n, err)
			}
			return
		}
		// A well-formed segment is exactly its frame.
		if SegmentHeaderSize+n*SegmentRecordOverhead+total != len(seg) {
			t.Fatalf("%d records of %d bytes in a %d-byte segment", n, total, len(seg))
		}
		recs, _ := decodeAll(seg)
		again, err := EncodeSegment(recs)
		if err != nil || !bytes.Equal(again, seg) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}
