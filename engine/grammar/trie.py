"""The vocabulary trie as arrays by depth, so a token mask is a few numpy gathers per depth.

The sorted table (vocab.py) already implies the trie: sorted entry k shares `lcp[k]` bytes
with entry k-1, so it adds one node at each depth lcp[k]+1 .. len(bytes). The trie is kept
level by level: a depth-d node is its parent's index among the depth d-1 nodes and the
byte on its edge; a token ends at one node. Walking it breadth-first over the automaton
(dense.py) visits every (state, node) pair once, with the work per depth in numpy.
smol-135m: 49,135 tokens, 100,297 nodes, depth 81 (about 0.5 MB of arrays).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class VocabTrie:
    parent: tuple[np.ndarray, ...]      # [D+1] of [n_d] int32: parent's index at depth d-1 (depth 0: the root)
    byte: tuple[np.ndarray, ...]        # [D+1] of [n_d] uint8: the byte on the edge into the node
    end_node: tuple[np.ndarray, ...]    # [D+1] of [e_d] int32: depth-d nodes where a token ends
    end_entry: tuple[np.ndarray, ...]   # [D+1] of [e_d] int32: ... and that token's sorted entry

    @property
    def depth(self) -> int:
        return len(self.parent) - 1

    def nbytes(self) -> int:
        return sum(a.nbytes for arrays in (self.parent, self.byte, self.end_node, self.end_entry)
                   for a in arrays)


def build_trie(sorted_bytes: tuple[bytes, ...], lcp: np.ndarray) -> VocabTrie:
    """The sorted, non-empty token bytes and their shared prefixes -> the trie by depth."""
    depth = max((len(b) for b in sorted_bytes), default=0)
    parent: list[list[int]] = [[] for _ in range(depth + 1)]
    byte: list[list[int]] = [[] for _ in range(depth + 1)]
    end_node: list[list[int]] = [[] for _ in range(depth + 1)]
    end_entry: list[list[int]] = [[] for _ in range(depth + 1)]
    path = [0]                                  # path[d]: the current path's node at depth d
    for k, (data, shared) in enumerate(zip(sorted_bytes, lcp.tolist())):
        del path[shared + 1:]
        for d in range(shared, len(data)):
            level = parent[d + 1]
            path.append(len(level))
            level.append(path[d])
            byte[d + 1].append(data[d])
        end_node[len(data)].append(path[len(data)])
        end_entry[len(data)].append(k)

    def arrays(rows, dtype):
        return tuple(np.array(r, dtype=dtype) for r in rows)
    return VocabTrie(arrays(parent, np.int32), arrays(byte, np.uint8),
                     arrays(end_node, np.int32), arrays(end_entry, np.int32))
