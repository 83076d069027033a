// Records the statements one processOnce call really sends, through PostgresStore's `pool`
// option (the same PgDriver code path as `connectionString`), so that the SQL floor and
// the hand-written Node variant replay exactly what the store does today — the same texts,
// the same parameters, the same number of round trips — and follow the store when it
// changes instead of drifting from a copy.
import { processOnce } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { benchPool, businessInsert } from './pg.mjs';

const CAPTURE_CONSUMER = 'bench-capture';
const CAPTURE_ID = 'bench-capture-id';

/**
 * Runs processOnce twice (the first call also checks the schema version) and returns the
 * statements of the second, each `{ text, values, business }` in the order sent.
 */
export async function captureProcessOnce(schema) {
  const pool = benchPool(1);
  const recorded = [];
  const recordingPool = {
    async connect() {
      const client = await pool.connect();
      return new Proxy(client, {
        get(target, property) {
          if (property === 'query') {
            return (text, values) => {
              const config = typeof text === 'string' ? { text, values } : text;
              recorded.push({ text: config.text, values: config.values });
              return target.query(text, values);
            };
          }
          const value = target[property];
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    },
    on: (event, listener) => pool.on(event, listener),
    removeListener: (event, listener) => pool.removeListener(event, listener),
    end: () => pool.end(),
  };
  const store = new PostgresStore({ pool: recordingPool, schema });
  const insert = businessInsert(schema);
  try {
    const work = (tx) => tx.query(insert, ['order-capture', 40]);
    await processOnce(store, { consumer: CAPTURE_CONSUMER, messageId: `${CAPTURE_ID}-warm` }, work);
    recorded.length = 0;
    await processOnce(store, { consumer: CAPTURE_CONSUMER, messageId: CAPTURE_ID }, work);
  } finally {
    await store.close();
    await pool.end();
  }
  return recorded.map((statement) => ({ ...statement, business: statement.text === insert }));
}

/** Replaces the captured consumer and message ID (also inside arrays) in a value. */
function substitute(value, consumer, messageId) {
  if (Array.isArray(value)) return value.map((v) => substitute(v, consumer, messageId));
  if (value === CAPTURE_CONSUMER) return consumer;
  if (value === CAPTURE_ID) return messageId;
  return value;
}

/** A SQL string literal (the bench's IDs never hold a backslash). */
function quote(value) {
  return `'${String(value).replaceAll("'", "''")}'`;
}

/**
 * Replaces the captured consumer and message ID where the store wrote them into the text
 * as literals (the claim it sends in BEGIN's message).
 */
function substituteText(text, consumer, messageId) {
  return text
    .replaceAll(quote(CAPTURE_ID), quote(messageId))
    .replaceAll(quote(CAPTURE_CONSUMER), quote(consumer));
}

/**
 * The captured statements as a function of one message: `(consumer, messageId, orderId)`
 * → the list of `{ text, values }` to send, the business INSERT getting `orderId`.
 */
export function replayPlan(statements) {
  return (consumer, messageId, orderId) =>
    statements.map(({ text, values, business }) => ({
      text: business ? text : substituteText(text, consumer, messageId),
      values: business ? [orderId, 40] : values?.map((v) => substitute(v, consumer, messageId)),
    }));
}

/** A SQL literal for a pgbench script; the message ID becomes `'m-' || :id`. */
function literal(value, consumer) {
  if (Array.isArray(value)) return `ARRAY[${value.map((v) => literal(v, consumer)).join(', ')}]`;
  if (value === CAPTURE_ID) return `'m-' || :id`;
  if (value === CAPTURE_CONSUMER) return `'${consumer}'`;
  if (typeof value === 'number') return String(value);
  return `'${String(value).replaceAll("'", "''")}'`;
}

/**
 * The captured statements as a pgbench script (simple protocol): parameters inlined as
 * literals, statements that went out as one message (`BEGIN ...; SET LOCAL ...`) joined
 * with `\;` so they stay one round trip, one line per round trip.
 */
export function pgbenchScript(statements, consumer) {
  const lines = ['\\set id random(1, 9000000000000000)'];
  for (const { text, values, business } of statements) {
    let sql = text.replace(/\s+/g, ' ').trim().replace(/;$/, '');
    if (business) {
      sql = sql.replace('$1', `'order-' || :id`).replace('$2', '40');
    } else {
      sql = sql
        .replaceAll(quote(CAPTURE_ID), `'m-' || :id`)
        .replaceAll(quote(CAPTURE_CONSUMER), `'${consumer}'`);
    }
    if (!business && values) {
      // Highest numbers first, so $1 does not eat the start of $10.
      for (let i = values.length; i >= 1; i--)
        sql = sql.replaceAll(`$${i}`, literal(values[i - 1], consumer));
    }
    lines.push(`${sql.replace(/;\s*/g, ' \\; ')};`);
  }
  return `${lines.join('\n')}\n`;
}
