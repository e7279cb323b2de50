package messages

import (
	"errors"
	"testing"
)

// FuzzGuard checks that Guard never panics, agrees with msgpack's own notion
// of a single well-formed value, and that whatever it accepts decodes into
// concrete structs without panicking and within a memory budget.
func FuzzGuard(f *testing.F) {
	for _, bomb := range guardBombs {
		f.Add(bomb.frame)
	}
	for c := 0; c < 256; c++ {
		if c != 0xc1 {
			f.Add(frameFor(byte(c)))
		}
	}
	for _, g := range goodFrames(f) {
		if len(g.frame) <= 4096 {
			f.Add(g.frame)
		}
	}
	f.Add(nested(32))
	f.Add(nested(33))
	f.Add(hexFrame("81 a1 43 de 00 03 a0 a0 a1 61 a0 a1 62 a1 63"))
	f.Add(hexFrame("83 a1 41 a2 68 69 a1 42 93 01 02 03 a1 43 81 a1 6b a1 76"))

	warmDecoders()

	f.Fuzz(func(t *testing.T, b []byte) {
		// Limits that only the structure of b can violate (every value
		// takes at least one byte), except nesting beyond maxGuardDepth.
		loose := Limits{MaxBytes: len(b) + 1, MaxDepth: maxGuardDepth, MaxItems: len(b) + 1}
		looseErr := Guard(b, loose)
		if looseErr != nil && !errors.Is(looseErr, ErrMalformed) {
			t.Fatalf("error does not wrap ErrMalformed: %v", looseErr)
		}
		if len(b) <= 4096 {
			ref := msgpackSkips(b)
			if looseErr == nil && !ref {
				t.Fatalf("Guard accepted % x, msgpack cannot skip it as one value", b)
			}
			// Guard is stricter than msgpack's grammar only about ext
			// payloads msgpack could read as maps.
			if looseErr != nil && ref && len(b) <= maxGuardDepth && !errors.Is(looseErr, errAmbiguousExt) {
				t.Fatalf("Guard refused valid % x: %v", b, looseErr)
			}
		}

		err := Guard(b, DefaultLimits())
		if err == nil && looseErr != nil {
			t.Fatalf("default limits accept what loose limits refuse: %v", looseErr)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return // never decode a refused frame
		}
		checkAcceptedDecodes(t, b, 1<<20)
	})
}
