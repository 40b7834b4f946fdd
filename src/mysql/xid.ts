/**
 * The one definition of onceflow's XA xids.
 *
 *   gtrid  'of:<pipeline>:<partition>:<epoch>'   names the epoch, so XA RECOVER finds its branches
 *          'of:<pipeline>:g<group>:<group epoch>'  the branch of a partition group's epoch
 *                                                  (src/protocol/group.ts)
 *   bqual  'a<attempt>.<token>.<random>'          one branch per attempt; <token> orders attempts
 *   formatID 0x4f46
 *
 * The token is the Temporal server's time (ms, base 36) at which the activity attempt that
 * opened the branch was scheduled. An attempt is scheduled only after the previous one failed or
 * timed out, so a branch with an older token can never be the one history decided while a newer
 * attempt runs: whoever holds a newer token may roll it back, nobody may roll back a newer one.
 * Branches written before tokens existed ('a<attempt>.<random>') count as token 0, the oldest.
 * XA statements take no parameters, so xids are written as hex literals (never interpolated text).
 */
export const XA_FORMAT_ID = 0x4f46;
const GTRID_PREFIX = 'of:';

export interface Xid {
  gtrid: string;
  bqual: string;
}

export const pipelineGtridPrefix = (pipeline: string) => `${GTRID_PREFIX}${pipeline}:`;
export const partitionGtridPrefix = (pipeline: string, partition: number) =>
  `${pipelineGtridPrefix(pipeline)}${partition}:`;
export const epochGtrid = (pipeline: string, partition: number, epoch: number) =>
  `${partitionGtridPrefix(pipeline, partition)}${epoch}`;

export const pipelineGroupGtridPrefix = (pipeline: string) => `${pipelineGtridPrefix(pipeline)}g`;
export const groupGtridPrefix = (pipeline: string, group: number) => `${pipelineGroupGtridPrefix(pipeline)}${group}:`;
export const groupGtrid = (pipeline: string, group: number, groupEpoch: number) =>
  `${groupGtridPrefix(pipeline, group)}${groupEpoch}`;

/** Parses 'of:<pipeline>:g<group>:<group epoch>'. */
export function parseGroupGtrid(gtrid: string): { pipeline: string; group: number; groupEpoch: number } | null {
  const m = /^of:([a-z0-9._-]+):g(\d+):(\d+)$/.exec(gtrid);
  if (!m) return null;
  return { pipeline: m[1]!, group: Number(m[2]), groupEpoch: Number(m[3]) };
}

/** Parses 'of:<pipeline>:<partition>:<epoch>'. */
export function parseGtrid(gtrid: string): { pipeline: string; partition: number; epoch: number } | null {
  const m = /^of:([a-z0-9._-]+):(\d+):(\d+)$/.exec(gtrid);
  if (!m) return null;
  return { pipeline: m[1]!, partition: Number(m[2]), epoch: Number(m[3]) };
}

/** A branch qualifier for an attempt scheduled at `token` (ms). */
export const attemptBqual = (attempt: number, token: number, random: string) =>
  `a${attempt}.${Math.floor(token).toString(36)}.${random}`;

/** The fencing token of a branch (0 for branches written before tokens existed). */
export function bqualToken(bqual: string): number {
  const m = /^a\d+\.([0-9a-z]+)\.[0-9a-f]+$/.exec(bqual);
  return m ? parseInt(m[1]!, 36) : 0;
}

export function xidSql(x: Xid): string {
  const hex = (s: string) => `X'${Buffer.from(s, 'utf8').toString('hex')}'`;
  return `${hex(x.gtrid)}, ${hex(x.bqual)}, ${XA_FORMAT_ID}`;
}

export const xidToString = (x: Xid) => `${x.gtrid}#${x.bqual}`;
export function xidFromString(s: string): Xid {
  const i = s.lastIndexOf('#');
  if (i < 0) throw new Error(`not an onceflow xid: ${s}`);
  return { gtrid: s.slice(0, i), bqual: s.slice(i + 1) };
}
