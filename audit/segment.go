package audit

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A segment is how records are stored: one JetStream message holding
// every record of one tenant that the node's writer committed together.
// The records inside are the exact encoded events (the bytes that are
// hashed and chained); the segment only frames them. docs/audit.md
// specifies the format for readers in other languages.
//
// Format, version 1 (all integers big-endian):
//
//	offset 0  4 bytes  magic "SOSA"
//	offset 4  1 byte   version, 1
//	offset 5  4 bytes  count: the number of records, at least 1
//	then count times:
//	          4 bytes  length of the record, at least 1
//	          length   the record's bytes
//
// Nothing follows the last record. A segment holds records of one tenant
// only, in the order the node handed them to its writer, so each turn's
// records appear in chain order.

// SegmentMagic starts every segment.
const SegmentMagic = "SOSA"

// SegmentVersion is the segment format version this package writes.
const SegmentVersion = 1

// SegmentHeaderSize is the fixed part of a segment before its records;
// each record adds SegmentRecordOverhead bytes to its own length.
const (
	SegmentHeaderSize     = 9
	SegmentRecordOverhead = 4
)

// MaxSegmentSize bounds a segment a reader accepts: 64 MiB, the largest
// message NATS allows. Records are never longer than the segment.
const MaxSegmentSize = 64 << 20

// ErrBadSegment is wrapped by every error DecodeSegment returns.
var ErrBadSegment = errors.New("audit: malformed segment")

// AppendSegmentHeader starts a segment of count records: what a writer
// that frames records as it goes appends first, then AppendSegmentRecord
// for each of the count records.
func AppendSegmentHeader(b []byte, count int) []byte {
	b = append(b, SegmentMagic...)
	b = append(b, SegmentVersion)
	return binary.BigEndian.AppendUint32(b, uint32(count))
}

// AppendSegmentRecord appends one framed record (non-empty).
func AppendSegmentRecord(b, data []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// EncodeSegment frames records (each non-empty) as one segment. The
// writer builds segments itself (AppendSegmentHeader, AppendSegmentRecord);
// EncodeSegment is for tools and tests.
func EncodeSegment(records [][]byte) ([]byte, error) {
	if len(records) == 0 {
		return nil, errors.New("audit: a segment holds at least one record")
	}
	n := SegmentHeaderSize
	for _, r := range records {
		if len(r) == 0 {
			return nil, errors.New("audit: empty record")
		}
		n += SegmentRecordOverhead + len(r)
	}
	if n > MaxSegmentSize {
		return nil, fmt.Errorf("audit: segment of %d bytes exceeds %d", n, MaxSegmentSize)
	}
	b := AppendSegmentHeader(make([]byte, 0, n), len(records))
	for _, r := range records {
		b = AppendSegmentRecord(b, r)
	}
	return b, nil
}

// DecodeSegment calls fn with each record of seg, in order; the slices
// alias seg. It checks the whole frame before the first call — magic,
// version, a count that the bytes can hold, every length within what
// remains, nothing after the last record — so a malformed (or forged)
// segment yields no record and an error wrapping ErrBadSegment. It never
// allocates in proportion to what the segment claims. fn's error is
// returned unchanged and stops the iteration.
func DecodeSegment(seg []byte, fn func(record []byte) error) error {
	count, err := checkSegment(seg)
	if err != nil {
		return err
	}
	p := seg[SegmentHeaderSize:]
	for range count {
		n := binary.BigEndian.Uint32(p)
		if err := fn(p[SegmentRecordOverhead : SegmentRecordOverhead+n : SegmentRecordOverhead+n]); err != nil {
			return err
		}
		p = p[SegmentRecordOverhead+n:]
	}
	return nil
}

// SegmentCount returns the number of records of a well-formed segment.
func SegmentCount(seg []byte) (int, error) {
	n, err := checkSegment(seg)
	return int(n), err
}

func checkSegment(seg []byte) (uint32, error) {
	switch {
	case len(seg) > MaxSegmentSize:
		return 0, fmt.Errorf("%w: %d bytes, more than %d", ErrBadSegment, len(seg), MaxSegmentSize)
	case len(seg) < SegmentHeaderSize || string(seg[:4]) != SegmentMagic:
		return 0, fmt.Errorf("%w: no %q header", ErrBadSegment, SegmentMagic)
	case seg[4] != SegmentVersion:
		return 0, fmt.Errorf("%w: version %d, this reader knows %d", ErrBadSegment, seg[4], SegmentVersion)
	}
	count := binary.BigEndian.Uint32(seg[5:])
	p := seg[SegmentHeaderSize:]
	// Each record takes at least SegmentRecordOverhead+1 bytes: a count
	// the bytes cannot hold is refused before the walk.
	if count == 0 || uint64(count)*(SegmentRecordOverhead+1) > uint64(len(p)) {
		return 0, fmt.Errorf("%w: %d records cannot fit in %d bytes", ErrBadSegment, count, len(p))
	}
	for i := range count {
		if len(p) < SegmentRecordOverhead {
			return 0, fmt.Errorf("%w: record %d: truncated length", ErrBadSegment, i)
		}
		n := binary.BigEndian.Uint32(p)
		p = p[SegmentRecordOverhead:]
		if n == 0 || uint64(n) > uint64(len(p)) {
			return 0, fmt.Errorf("%w: record %d: length %d with %d bytes left", ErrBadSegment, i, n, len(p))
		}
		p = p[n:]
	}
	if len(p) != 0 {
		return 0, fmt.Errorf("%w: %d bytes after the last record", ErrBadSegment, len(p))
	}
	return count, nil
}
