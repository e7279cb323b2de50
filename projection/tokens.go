package projection

import (
	"fmt"
	"sync"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// MethodEstimate is Projection.TokenMethod for profiles counted by the
// estimate.
const MethodEstimate = "estimate"

// offline is the only BPE loader tiktoken is given: it reads the ranks
// embedded in tiktoken-go-loader, so no encoding is ever downloaded or
// read from disk.
var offlineOnce sync.Once

// encoder is one OpenAI encoding, loaded on first use. The offline loader
// is installed (once, process-wide) before any encoding is requested.
type encoder struct {
	name string
	once sync.Once
	tk   *tiktoken.Tiktoken
	err  error
}

var encoders = map[string]*encoder{
	EncodingO200k:  {name: EncodingO200k},
	EncodingCL100k: {name: EncodingCL100k},
}

func (e *encoder) load() (*tiktoken.Tiktoken, error) {
	e.once.Do(func() {
		offlineOnce.Do(func() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) })
		e.tk, e.err = tiktoken.GetEncoding(e.name)
	})
	return e.tk, e.err
}

// tokenMethod is how profile's tokens are counted with the chosen
// encoding; the encoding is loaded here, so counting cannot fail later.
func tokenMethod(p Profile, encoding string) (string, error) {
	if encoding == "" {
		encoding = EncodingO200k
	}
	enc, ok := encoders[encoding]
	if !ok {
		return "", fmt.Errorf("%w: unknown encoding %q", ErrOptions, encoding)
	}
	if !p.exact() {
		return MethodEstimate, nil
	}
	if _, err := enc.load(); err != nil {
		return "", fmt.Errorf("projection: loading %s: %w", encoding, err)
	}
	return encoding, nil
}

// CountTokens returns the exact number of tokens of text in an OpenAI
// encoding ("o200k_base" or "cl100k_base"). Special-token text such as
// "<|endoftext|>" counts as ordinary text, as the APIs treat user content.
func CountTokens(encoding, text string) (int, error) {
	enc, ok := encoders[encoding]
	if !ok {
		return 0, fmt.Errorf("%w: unknown encoding %q", ErrOptions, encoding)
	}
	tk, err := enc.load()
	if err != nil {
		return 0, err
	}
	return len(tk.EncodeOrdinary(text)), nil
}

func countTokens(method string, b []byte) int {
	if method == MethodEstimate {
		return EstimateTokens(b)
	}
	n, _ := CountTokens(method, string(b))
	return n
}

// EstimateTokens estimates the tokens of compact JSON for model families
// whose tokenizer is not public (Anthropic, Gemini) — and MCP, whose
// listing a model sees through some client's profile. It follows how BPE
// tokenizers split text: a run of ASCII letters (a word, a JSON key) of up
// to 10 letters costs one token and a longer one one per started 7, a
// run of digits one per started 3, a run of punctuation one per started 4
// characters, a run of several spaces one (a single space joins the next
// word), and every non-ASCII character one. The constants were fitted to
// o200k_base on the test catalogues; TestEstimateError measures the error
// and docs/model-facing.md states it.
func EstimateTokens(b []byte) int {
	const (
		none = iota
		letter
		digit
		space
		punct
	)
	n, class, run := 0, none, 0
	flush := func() {
		switch class {
		case letter:
			if run <= 10 {
				n++
			} else {
				n += (run + 6) / 7
			}
		case digit:
			n += (run + 2) / 3
		case space:
			if run > 1 {
				n++
			}
		case punct:
			n += (run + 3) / 4
		}
		class, run = none, 0
	}
	for i := 0; i < len(b); {
		c := b[i]
		var k int
		switch {
		case c >= 0x80:
			flush()
			_, size := utf8.DecodeRune(b[i:])
			n++
			i += size
			continue
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			k = letter
		case c >= '0' && c <= '9':
			k = digit
		case c == ' ':
			k = space
		default:
			k = punct
		}
		if k != class {
			flush()
			class = k
		}
		run++
		i++
	}
	flush()
	return n
}
