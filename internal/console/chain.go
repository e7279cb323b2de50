package console

import (
	"fmt"
	"slices"

	"github.com/sharedos/sharedos/audit"
)

// chainPicture is the audit page's drawing of a tenant's trail, as inline
// SVG: the records along the x axis in stream order; one bar per turn,
// from its first event to its last; each checkpoint a mark on the top
// row, with a line down to every turn whose head it attests. Coordinates
// are computed here, so the template only places them.
type chainPicture struct {
	Width, Height int
	CheckpointY   int
	Turns         []picTurn
	Checkpoints   []picCheckpoint
	Links         []picLink
	// Omitted turns are not drawn (only the last maxPictureTurns to start).
	Omitted int
	Empty   bool
}

type picTurn struct {
	X, Y, W      int
	LabelY       int
	Label, Title string
	Class        string // "closed", "open" or "bad"
}

type picCheckpoint struct {
	X            int
	Title, Class string // "cp" or "cp bad"
}

// picLink is a checkpoint's line down to a turn head it attests (a dot
// on the turn's row at Y2).
type picLink struct{ X, Y1, Y2 int }

// pictureBuilder collects, in stream order, what the picture needs.
type pictureBuilder struct {
	tenant string
	pos    int
	turns  map[string]*turnSpan
	order  []*turnSpan
	cps    []cpMark
}

type turnSpan struct {
	node, id    string
	first, last int
	events      int
	closed      bool
	attestedAt  []int
}

type cpMark struct {
	pos  int
	node string
	seq  uint64
	n    int // heads of the tenant's turns it attests
}

func newPictureBuilder(tenant string) *pictureBuilder {
	return &pictureBuilder{tenant: tenant, turns: map[string]*turnSpan{}}
}

// add takes one record of the tenant (ev set) or a checkpoint (ev nil).
func (b *pictureBuilder) add(data []byte, ev *audit.Event) {
	if ev == nil {
		if !audit.IsCheckpoint(data) {
			return
		}
		p, err := audit.ParseCheckpoint(data)
		if err != nil {
			return
		}
		m := cpMark{pos: b.pos, node: p.Node, seq: p.Seq}
		for _, h := range p.Turns {
			if t, ok := b.turns[p.Node+"/"+h.TurnID]; ok && h.Tenant == b.tenant {
				t.attestedAt = append(t.attestedAt, b.pos)
				m.n++
			}
		}
		b.cps = append(b.cps, m)
		b.pos++
		return
	}
	key := ev.Node + "/" + ev.TurnID
	t, ok := b.turns[key]
	if !ok {
		t = &turnSpan{node: ev.Node, id: ev.TurnID, first: b.pos}
		b.turns[key] = t
		b.order = append(b.order, t)
	}
	t.last = b.pos
	t.events++
	t.closed = t.closed || ev.Type == audit.TurnClosed
	b.pos++
}

// Layout of the picture, in pixels.
const (
	picWidth   = 1120
	picLeft    = 230 // turn labels
	picRight   = 16
	picTop     = 14
	picRow     = 22
	picBar     = 12
	maxPicMark = 400 // checkpoint marks drawn at most (those attesting drawn turns first)
)

func (b *pictureBuilder) draw(rep audit.Report) chainPicture {
	pic := chainPicture{Width: picWidth, CheckpointY: picTop}
	if b.pos == 0 {
		pic.Empty, pic.Height = true, 0
		return pic
	}
	badTurn, badCP := map[string]bool{}, map[string]bool{}
	for _, v := range rep.Violations {
		if v.Checkpoint {
			badCP[fmt.Sprintf("%s/%d", v.Node, v.Seq)] = true
		} else {
			badTurn[v.TurnID] = true
		}
	}
	turns := b.order
	if len(turns) > maxPictureTurns {
		pic.Omitted = len(turns) - maxPictureTurns
		turns = turns[len(turns)-maxPictureTurns:]
	}
	span := max(b.pos-1, 1)
	x := func(pos int) int { return picLeft + pos*(picWidth-picLeft-picRight)/span }
	drawn := map[int]bool{} // checkpoint positions with a line to a drawn turn
	rowY := func(i int) int { return picTop + 2*picRow + i*picRow }
	for i, t := range turns {
		y := rowY(i)
		class := "open"
		if t.closed {
			class = "closed"
		}
		if badTurn[t.id] {
			class = "bad"
		}
		w := max(x(t.last)-x(t.first), 4)
		pic.Turns = append(pic.Turns, picTurn{X: x(t.first), Y: y, W: w, LabelY: y + picBar - 2, Class: class,
			Label: short(t.id), Title: fmt.Sprintf("%s/%s: %d events, %s", t.node, t.id, t.events, class)})
		for _, pos := range t.attestedAt {
			pic.Links = append(pic.Links, picLink{X: x(pos), Y1: picTop + picBar, Y2: y + picBar/2})
			drawn[pos] = true
		}
	}
	marks := b.cps
	if len(marks) > maxPicMark {
		marks = slices.DeleteFunc(slices.Clone(marks), func(m cpMark) bool { return !drawn[m.pos] })
		marks = marks[max(len(marks)-maxPicMark, 0):]
	}
	for _, m := range marks {
		class := "cp"
		if badCP[fmt.Sprintf("%s/%d", m.node, m.seq)] {
			class = "cp bad"
		}
		pic.Checkpoints = append(pic.Checkpoints, picCheckpoint{X: x(m.pos) - 4, Class: class,
			Title: fmt.Sprintf("checkpoint %s #%d: attests %d of this tenant's turn heads", m.node, m.seq, m.n)})
	}
	pic.Height = rowY(len(turns)) + picRow/2
	return pic
}
