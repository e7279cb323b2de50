package conformance

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cell is one row × column result.
type Cell struct {
	Passed bool
	Proven bool // the row failed with its mechanism switched off
	Err    string
	// NA: the row is about something the column does not have.
	NA bool
}

func (c Cell) String() string {
	switch {
	case c.NA:
		return "n/a"
	case c.Passed && c.Proven:
		return "pass, proven"
	case c.Passed:
		return "PASS, NOT PROVEN"
	default:
		return "FAIL"
	}
}

// Table collects cells; safe for concurrent use.
type Table struct {
	mu      sync.Mutex
	columns []string
	cells   map[[2]string]Cell
}

// RunTable runs every row in every column, each normally and with its
// mechanism disabled, as subtests "column/row" and "column/row/proof". A
// cell fails its test when the row fails, or when it still passes with
// its mechanism switched off.
func RunTable(t *testing.T, columns []Column) *Table {
	tab := &Table{cells: map[[2]string]Cell{}}
	for _, col := range columns {
		tab.columns = append(tab.columns, col.Name)
		t.Run(col.Name, func(t *testing.T) {
			for _, row := range Rows() {
				if !row.AppliesTo(col) {
					tab.set(row.Name, col.Name, Cell{NA: true})
					continue
				}
				t.Run(row.Name, func(t *testing.T) {
					var cell Cell
					if err := runRow(t, col, row, false); err != nil {
						cell.Err = err.Error()
						t.Errorf("%s / %s: %v", col.Name, row.Name, err)
					} else {
						cell.Passed = true
					}
					t.Run("proof", func(t *testing.T) {
						if err := runRow(t, col, row, true); err != nil {
							cell.Proven = true
							t.Logf("with the mechanism off the row fails, as it must: %v", err)
						} else {
							t.Errorf("%s / %s still passes with its mechanism switched off: the row is not evidence", col.Name, row.Name)
						}
					})
					tab.set(row.Name, col.Name, cell)
				})
			}
		})
	}
	return tab
}

func runRow(t *testing.T, col Column, row Row, disabled bool) error {
	f := NewFixture(t)
	opts := f.Options()
	if row.Options != nil {
		row.Options(&opts)
	}
	if disabled {
		row.Disable(&opts.Switches)
	}
	d := col.Start(t, f, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return row.Run(ctx, &H{F: f, D: d})
}

func (tab *Table) set(row, col string, c Cell) {
	tab.mu.Lock()
	tab.cells[[2]string{row, col}] = c
	tab.mu.Unlock()
}

// Print writes the table.
func (tab *Table) Print(w io.Writer) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	const first = 32
	fmt.Fprintf(w, "%-*s", first, "row")
	for _, c := range tab.columns {
		fmt.Fprintf(w, " | %-18s", c)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.Repeat("-", first+len(tab.columns)*21))
	for _, r := range Rows() {
		fmt.Fprintf(w, "%-*s", first, r.Name)
		for _, c := range tab.columns {
			cell, ok := tab.cells[[2]string{r.Name, c}]
			s := "not run"
			if ok {
				s = cell.String()
			}
			fmt.Fprintf(w, " | %-18s", s)
		}
		fmt.Fprintln(w)
	}
}
