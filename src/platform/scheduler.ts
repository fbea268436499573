// Placement: which node a new sandbox or database goes to. A pure function over what the nodes table
// says (plus what this replica placed since), so the 1,000-node simulation runs the very same code.

export interface NodeLoad {
  id: string;
  /** Up (heartbeat within the down-after window) and `active` (not cordoned, not draining). */
  eligible: boolean;
  cores: number;
  memoryBytes: number;
  sandboxes: number;
  databases: number;
  templates: readonly string[];
}

export interface PlacementRequest {
  kind: 'sandbox' | 'database';
  /** A sandbox's template: a node that has it built starts it in seconds instead of minutes. */
  template?: string;
  /** How many of the owner's resources each node holds (node id -> count), for affinity. */
  ownerCounts?: Readonly<Record<string, number>>;
}

/** A sandbox weighs as much as this many databases (a database is a file and a share of a pool). */
const DATABASE_WEIGHT = 0.1;
/** A node without the template pays as if it held this many more sandboxes per core. */
const TEMPLATE_MISSING = 2;
/**
 * The owner's affinity breaks ties only (nodes equally loaded): it never outweighs a difference in load,
 * or an owner creating many resources in a row would pile them on one node.
 */
const AFFINITY = 1e-6;
const AFFINITY_CAP = 4;

/** Load per core after placing one more: lower is better. Exported for the simulation's evenness report. */
export function loadOf(n: NodeLoad): number {
  return (n.sandboxes + n.databases * DATABASE_WEIGHT) / Math.max(1, n.cores);
}

/**
 * The node with the lowest score (free capacity per core, template built, owner's affinity); ties are
 * broken at random so replicas deciding from the same heartbeat do not all pick the same node.
 * Undefined when no node is eligible (all cordoned, draining or down).
 */
export function choose(nodes: readonly NodeLoad[], req: PlacementRequest, random: () => number = Math.random): string | undefined {
  let best: string | undefined;
  let bestScore = Number.POSITIVE_INFINITY;
  let ties = 0;
  // Hoisted out of the loop: it runs over every node for every placement.
  const added = req.kind === 'sandbox' ? 1 : DATABASE_WEIGHT;
  const template = req.kind === 'sandbox' ? req.template : undefined;
  const owner = req.ownerCounts;
  for (let i = 0; i < nodes.length; i++) {
    const n = nodes[i]!;
    if (!n.eligible) continue;
    let s = (n.sandboxes + n.databases * DATABASE_WEIGHT + added) / Math.max(n.cores, 1);
    if (template !== undefined && !n.templates.includes(template)) s += TEMPLATE_MISSING;
    if (owner !== undefined) {
      const mine = owner[n.id];
      if (mine !== undefined && mine > 0) s -= AFFINITY * Math.min(mine, AFFINITY_CAP);
    }
    if (s < bestScore - 1e-9) {
      best = n.id;
      bestScore = s;
      ties = 1;
    } else if (Math.abs(s - bestScore) <= 1e-9) {
      // Equal to within rounding (affinity differences are larger than this): a true tie.
      ties++;
      // Reservoir sampling: each tied node is kept with probability 1/ties.
      if (random() * ties < 1) best = n.id;
    }
  }
  return best;
}
