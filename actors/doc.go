// Package actors is the kernel's actor shell: a Kernel API over a
// protoactor-go system with one directory actor and one actor per turn.
//
//	Kernel.Open ──▶ directory ──spawns──▶ turn actor "turns/<turn id>"
//	Kernel.List/Invoke/... ──────────────▶ turn actor (addressed by name,
//	                                        no lookup on the call path)
//	turn actor ──goroutine──▶ provider.Catalog (once) / provider.Invoke
//	turn actor ──▶ audit.Sink
//
// The directory owns leases: which turns are open, under which authority
// key, and who holds them. A turn actor owns everything else about its
// turn through a turn.Machine: the held registry and authority, enabled
// namespaces, step count, audit chain position. It handles one message at
// a time; resolution and execution run on goroutines whose results come
// back to its mailbox, so neither a slow provider nor a slow tool blocks
// the turn's decisions, and messages that arrive while the catalogue is
// being resolved wait for that one resolution, in order.
package actors
