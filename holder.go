package leasehold

// The holder calls' parameters, one type each, passed as they are from
// the API (web) through the rules (appliance) to the catalog (store): a
// call names its caller by fields, not by the place of three int64s in a
// row, where a node id and a group id swapped would still compile.

// GroupHolder is who makes a holder call on a group: the node, the group whose
// lease it holds and the fence that lease was granted at. Rule 6 checks
// all three.
type GroupHolder struct {
	NodeID  int64
	GroupID int64
	Fence   int64
}

// RangeHolder is who makes a holder call on a range in work: the node,
// the range, and the fence of the lease of the range's group (rule 6).
type RangeHolder struct {
	NodeID  int64
	RangeID int64
	Fence   int64
}

// FinishedRange is a range its holder reports done with the headers it
// counted, in the call that asks for the next one (rule 4): a range costs
// one call. On the wire it is Finished. Headers counts the items indexed,
// whatever the source: the word is the API's and the catalog's, from the
// first source, Usenet (see the glossary in docs/ARCHITECTURE.md).
type FinishedRange struct {
	Range   int64
	Headers int64
}
