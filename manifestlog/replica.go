package manifestlog

import "github.com/segkv/segkv/wal"

// Replicas: why every group of frames is written twice.
//
// The watermark of a frame vouches that everything before it was synced, so
// damage to any frame that a later frame vouches for is reported as
// corruption. The frames of the last commit have no such witness: a bit flip
// in them looks exactly like the torn tail a crash leaves, and dropping them
// would silently lose an acknowledged commit (and the files it named, which
// recovery then removes as orphans).
//
// So every write of a group of frames (the edits of one group commit; the
// copy-forward backlog with the activate record; the activate record of a
// fresh log) ends with a replica record that repeats the group's payloads,
// in the same write and under the same sync. On Open, an invalid frame
// followed by a valid replica of its group is restored from the replica,
// whether the damage was a crash tearing an unacknowledged group (which is
// then complete, so adopting it is a legal prefix of history) or a bit flip
// in an acknowledged one. A group whose replica is missing (a crash kept
// the group and tore its replica) gets a fresh replica at Open.
//
// The cost is one extra frame per commit group in the same write, about
// doubling the manifest bytes per commit (still O(1)); no extra barrier.

// maxGroupPayload bounds the payload bytes one replica copies; a larger run
// of frames is written as several groups, each with its own replica (a
// single larger edit forms a group alone).
const maxGroupPayload = 4 << 20

// appendGroups appends payloads as frames with watermark wm, in groups each
// followed by its replica, to buf, whose first byte will be written at file
// offset off.
func appendGroups(buf []byte, off int64, payloads [][]byte, wm uint64) []byte {
	for len(payloads) > 0 {
		n, size := 0, 0
		for n < len(payloads) && (n == 0 || size+len(payloads[n]) <= maxGroupPayload) {
			size += len(payloads[n])
			n++
		}
		start := off + int64(len(buf))
		for _, p := range payloads[:n] {
			buf = wal.AppendFrame(buf, p, wm)
		}
		buf = wal.AppendFrame(buf, appendReplica(make([]byte, 0, replicaSize(payloads[:n])), start, payloads[:n]), wm)
		payloads = payloads[n:]
	}
	return buf
}

// groupsSize is an upper bound of what appendGroups appends.
func groupsSize(payloads [][]byte) int {
	n := 0
	for _, p := range payloads {
		n += 2*(frameHeaderSize+len(p)) + 2*10 + frameHeaderSize + 1 + 2*10
	}
	return n
}
