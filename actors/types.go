package actors

import (
	"encoding/json"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/sharedos/sharedos/authority"
	"github.com/sharedos/sharedos/catalog"
	"github.com/sharedos/sharedos/internal/providers"
	"github.com/sharedos/sharedos/turn"
)

// Opened is the answer to Open: the turn and the caller's lease on it.
type Opened struct {
	TurnID  string
	LeaseID string
	// Attached is true when the turn was already open and this lease joined it.
	Attached bool
}

// ToolList is a listing: the tools shown and the turn's catalogHash.
type ToolList struct {
	CatalogHash string
	Tools       []ListedTool
}

// ListedTool is one tool as shown to a model.
type ListedTool struct {
	Alias        string
	Identity     catalog.Identity
	Namespace    string
	Revision     string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Annotations  json.RawMessage
}

// NamespaceInfo describes one namespace of the held catalogue.
type NamespaceInfo = turn.NamespaceInfo

// CallResult is a completed call.
type CallResult struct {
	CallID      string
	CatalogHash string
	Alias       string
	Identity    catalog.Identity
	Result      providers.Result
	Duration    time.Duration
}

// Messages to a turn actor. Each carries the caller's access context; the
// kernel stamps Now from its clock.
type (
	listTools        struct{ access authority.AccessContext }
	listNamespaces   struct{ access authority.AccessContext }
	updateNamespaces struct {
		access     authority.AccessContext
		namespaces []string
	}
	invokeTool struct {
		access authority.AccessContext
		inv    turn.Invocation
	}
	// closeTurn ends the turn; sent by the directory when the last lease
	// is released, the turn idles out, or the kernel shuts down.
	closeTurn struct{ why string }
	// resolved carries a resolution back to the turn's mailbox.
	resolved struct{ res turn.Resolution }
	// completed carries an execution's end back to the turn's mailbox.
	completed struct {
		sender *actor.PID
		comp   turn.Completion
		result providers.Result
	}
)

// Messages to the directory.
type (
	openTurn struct {
		access authority.AccessContext
	}
	releaseLease struct {
		access  authority.AccessContext
		leaseID string
	}
	// sweepIdle makes the directory close the turns that went idle.
	sweepIdle     struct{}
	turnFinished  struct{ turnID string }
	closeAll      struct{}
	turnsSnapshot struct{}
	// closedTurn asks whether a turn id was recently closed.
	closedTurn struct{ turnID string }
)
