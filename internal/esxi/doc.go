// Package esxi talks to a VMware ESXi host over SSH exec channels and turns
// what the host prints into typed, validated data.
//
// The package has four layers:
//
//   - Quoting and commands: [Quote] is the only function that turns data into
//     shell text, and [Command] is the closed set of operations the package
//     ever sends. [Batch] frames several commands into one exec with a random
//     per-exec nonce so host output cannot forge a section boundary.
//   - Parsers: one per host output format (getallvms, vmInventory.xml, .vmx,
//     .vmdk descriptors, .vmsd, power.getstate, get.guest, get.summary,
//     snapshot.get, vim-cmd faults). Each returns what it could parse plus a
//     list of [Problem]s for what it could not; none of them guesses.
//   - The SSH transport: [Client] keeps one connection per host with a bounded
//     pool of exec sessions; [Registry] shares clients by host name and
//     connects lazily.
//   - Operations on [Client]: [Client.Inventory], [Client.VM], power control
//     and [Client.ReadRange].
//
// Errors are classified where they arise ([Classify]) as [Transient],
// [NeedsHuman] or [Permanent], and their messages say what to do next.
package esxi
