// Package state is the changelog of window state (docs/delivery.md#the-changelog): the binary
// encoding of a partition's state entries and position, and the restore
// of a changelog partition read from its start.
//
// A changelog record's key is (version, kind, partition, start, group key);
// its value starts with the format version and the commit tag, so a later
// release can read what this one wrote. A tombstone (nil value) carries
// its tag in the TagHeader header. Every record of one commit of a
// partition has the same tag, and the partition's position record (input
// offset and watermark generator) is written after the commit's other
// records. A tag's high 32 bits are its owner's epoch (Epoch): each
// restore starts a new one, above every epoch it read (Result.NextTag),
// and counts its commits in the low bits. A Restorer takes, for each
// entry, its latest committed record: one that a later position of the
// same epoch, tagged at or above it, covers. So a commit cut short by a
// crash (at least once delivery: no transaction) is left out as a whole,
// and so is whatever a stale writer wrote, an instance that lost the
// partition and still wrote (at least once: a zombie): its records are
// of an older epoch than the new owner's positions, its position is left
// out once the new owner wrote, and the keys it wrote are written again
// by the next commit (Result.Stale).
//
// A Restorer takes a partition's records at any pace (a restore, or a
// standby copy that tails the changelog and finishes later) and keeps
// about the partition's live changelog bytes: each key's latest committed
// record and the records after it, in an arena with an 8-byte index slot
// a key, superseded records reclaimed by compaction (docs/design.md,
// "Restore"). Finish hands the entries to the window operators decoded
// into one reused windowing.Entry, lent for each call, and frees the
// arena as it goes.
//
// A partition's windows belong to generations (docs/design.md#generations-in-the-changelog): a generation
// record (GenerationKey, AppendGeneration) holds a generation's settings
// and cut-over, its entries' keys carry its config_version
// (AppendGenerationKey), and FinishGenerations returns the generations
// with the entries; a changelog written before generations restores as one
// generation of unknown settings (docs/design.md, "Generations in the
// changelog").
//
// The package is pure: no I/O, no clock, no goroutines. A Restorer is
// not safe for concurrent use; distinct Restorers are independent.
package state
