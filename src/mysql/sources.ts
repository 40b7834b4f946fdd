/**
 * Source partition ids: each (topic, partition) a pipeline reads gets a small integer id, the key
 * of everything kept per partition (workflow ids, transactional ids, XA gtrids, ledger rows,
 * the progress partition). Ids are assigned once, in discovery order, and kept here, so they stay
 * the same when partitions are added to any topic, across continue-as-new, and across a stop and
 * a new start of the pipeline (which discovers afresh). A single-topic pipeline's ids are its
 * partition numbers, as before this table existed.
 */
import type { Pool, RowDataPacket } from 'mysql2/promise';
import { ER_NO_SUCH_TABLE, sqlErrno } from './errors';

export const SOURCES_TABLE = 'onceflow_sources';

export interface SourceAssignment {
  /** The source partition id. */
  id: number;
  topic: string;
  partition: number;
  /** Added after the pipeline's first discovery: read from the partition's start whatever source.startFrom says. */
  discovered: boolean;
}

export async function ensureSourcesTable(db: Pool): Promise<void> {
  await db.query(`CREATE TABLE IF NOT EXISTS \`${SOURCES_TABLE}\` (
    pipeline VARCHAR(64) NOT NULL,
    source_partition INT NOT NULL,
    topic VARCHAR(249) NOT NULL,
    topic_partition INT NOT NULL,
    discovered TINYINT NOT NULL DEFAULT 0,
    assigned_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    PRIMARY KEY (pipeline, source_partition),
    UNIQUE KEY by_topic (pipeline, topic, topic_partition)
  ) ENGINE=InnoDB`);
}

async function selectSources(db: Pick<Pool, 'query'>, pipeline: string): Promise<SourceAssignment[]> {
  const [rows] = await db.query<RowDataPacket[]>(
    `SELECT source_partition AS id, topic, topic_partition AS \`partition\`, discovered FROM \`${SOURCES_TABLE}\` WHERE pipeline = ? ORDER BY source_partition`,
    [pipeline],
  );
  return rows.map((r) => ({
    id: Number(r.id),
    topic: String(r.topic),
    partition: Number(r.partition),
    discovered: Number(r.discovered) === 1,
  }));
}

/** Every assignment of the pipeline, by id; [] when none was made (or the table does not exist yet). */
export async function listSources(db: Pool, pipeline: string): Promise<SourceAssignment[]> {
  try {
    return await selectSources(db, pipeline);
  } catch (e) {
    if (sqlErrno(e) === ER_NO_SUCH_TABLE) return [];
    throw e;
  }
}

/**
 * Assigns the next free ids to the (topic, partition) pairs not yet known, in the order given;
 * returns every assignment of the pipeline and which of them were new. Serialised per pipeline
 * with a named lock, so two attempts (a retry and a zombie) never hand out one id twice;
 * idempotent: a repeated call assigns nothing.
 */
export async function assignSources(
  db: Pool,
  pipeline: string,
  found: { topic: string; partition: number }[],
): Promise<{ all: SourceAssignment[]; added: SourceAssignment[] }> {
  const conn = await db.getConnection();
  const lock = `onceflow.sources.${pipeline}`;
  try {
    const [[got]] = await conn.query<RowDataPacket[]>('SELECT GET_LOCK(?, 30) AS ok', [lock]);
    if (Number(got?.ok) !== 1) throw new Error(`could not take the lock ${lock} within 30 s`);
    try {
      const all = await selectSources(conn, pipeline);
      const known = new Set(all.map((a) => `${a.topic}\u0000${a.partition}`));
      let next = all.reduce((m, a) => Math.max(m, a.id + 1), 0);
      const added: SourceAssignment[] = [];
      for (const f of found) {
        if (known.has(`${f.topic}\u0000${f.partition}`)) continue;
        const a = { id: next++, topic: f.topic, partition: f.partition, discovered: all.length > 0 };
        await conn.query(
          `INSERT INTO \`${SOURCES_TABLE}\` (pipeline, source_partition, topic, topic_partition, discovered) VALUES (?, ?, ?, ?, ?)`,
          [pipeline, a.id, a.topic, a.partition, a.discovered ? 1 : 0],
        );
        known.add(`${f.topic}\u0000${f.partition}`);
        added.push(a);
      }
      return { all: [...all, ...added], added };
    } finally {
      await conn.query('SELECT RELEASE_LOCK(?)', [lock]).catch(() => undefined);
    }
  } finally {
    conn.release();
  }
}
