/**
 * The chaos report: one table row per broker run, then the details of each run.
 */

const COLUMNS = /** @type {const} */ ([
  [
    'broker',
    (/** @type {import('./runChaos.mjs').ChaosResult} */ r) =>
      `${r.broker}${r.client === 'platformatic' ? ' (platformatic)' : ''}${r.defect ? ` (defect: ${r.defect})` : ''}`,
  ],
  ['messages', (r) => count(r.messages)],
  ['published', (r) => count(r.published)],
  ['deliveries', (r) => count(r.deliveries)],
  ['duplicates skipped', (r) => count(r.duplicatesSkipped)],
  ['kills', (r) => `${r.kills} (${r.killsBy.random}/${r.killsBy.beforeCommit}/${r.killsBy.afterCommit})`],
  ['redeliveries', (r) => count(r.redeliveries)],
  ['dead letters', (r) => deadLetterText(r)],
  ['lost', (r) => count(r.lost)],
  ['doubled', (r) => count(r.doubled)],
  ['time', (r) => `${(r.durationMs / 1000).toFixed(1)} s`],
]);

/**
 * A Markdown table, one row per run.
 *
 * @param {import('./runChaos.mjs').ChaosResult[]} results
 */
export function formatTable(results) {
  const header = COLUMNS.map(([name]) => name);
  const rows = results.map((result) => COLUMNS.map(([, cell]) => cell(result)));
  const widths = header.map((name, i) => Math.max(name.length, ...rows.map((row) => String(row[i]).length)));
  const line = (/** @type {string[]} */ cells) =>
    `| ${cells.map((cell, i) => (i === 0 ? cell.padEnd(/** @type {number} */ (widths[i])) : cell.padStart(/** @type {number} */ (widths[i])))).join(' | ')} |`;
  const rule = `|${widths.map((w, i) => (i === 0 ? `${'-'.repeat(w + 1)}-` : `${'-'.repeat(w + 1)}:`)).join('|')}|`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

/**
 * What one run did, beyond the table row.
 *
 * @param {import('./runChaos.mjs').ChaosResult} r
 */
export function formatDetails(r) {
  const lines = [
    `${r.broker}${r.client === 'platformatic' ? ' on @platformatic/kafka' : ''}${r.defect ? ` (defect: ${r.defect})` : ''}: ${r.ok ? 'OK' : 'FAILED'} in ${(r.durationMs / 1000).toFixed(1)} s`,
    `  command:        ${r.command}`,
    `  orders:         ${count(r.messages)} (published ${count(r.published)}: ${count(r.producerDuplicates)} producer duplicates, ${r.poison} poison)`,
    `  database:       ${count(r.paymentRows)} payment rows, ${count(r.markers)} processed markers`,
    `  provider:       ${count(r.charges)} charges, ${money(r.chargedCents)} charged, ${money(r.expectedCents)} expected; ` +
      `${r.mismatched} payment rows naming another charge than the provider's`,
    `  kills:          ${r.kills} SIGKILL (random ${r.killsBy.random}, before commit ${r.killsBy.beforeCommit}, after commit ${r.killsBy.afterCommit}); ${r.unexpectedExits} unexpected exits`,
    `  faults:         ${r.ackDropped} acks dropped, ${r.stalls} handler stalls past the lease`,
    `  events:         ${Object.entries(r.events)
      .map(([name, n]) => `${name}=${n}`)
      .join(' ')}`,
    `  dead letters:   ${deadLetterText(r)}; poison ${r.poisonAccounted ? 'all accounted for' : 'NOT all accounted for'}${
      r.deadLetterCopies ? ` (${r.deadLetterCopies} dead-lettered twice: copy sent, ack lost)` : ''
    }${r.ordersDeadLettered.length ? `; orders: ${r.ordersDeadLettered.slice(0, 5).join(', ')}` : ''}`,
    `  broker:         ${r.drained ? 'drained' : `NOT drained (backlog ${r.backlog})`}`,
    `  lost:           ${r.lost}${r.lostIds.length ? ` (${r.lostIds.join(', ')}${r.lost > r.lostIds.length ? ', …' : ''})` : ''}`,
    `  doubled:        ${r.doubled}${r.doubledIds.length ? ` (${r.doubledIds.join(', ')}${r.doubled > r.doubledIds.length ? ', …' : ''})` : ''}`,
  ];
  for (const [fault, meaning] of Object.entries(r.notes))
    lines.push(`  ${`${fault}:`.padEnd(15)} ${meaning}`);
  lines.push('  timeline:');
  for (const { atMs, what } of r.timeline)
    lines.push(`    ${(atMs / 1000).toFixed(1).padStart(7)} s  ${what}`);
  if (r.keptSchema) lines.push(`  kept schema:    ${r.keptSchema} (evidence)`);
  if (r.logDir) lines.push(`  consumer logs:  ${r.logDir}`);
  return lines.join('\n');
}

/** @param {import('./runChaos.mjs').ChaosResult} r */
function deadLetterText(r) {
  const entries = Object.entries(r.deadLetters);
  if (entries.length === 0) return '0';
  return entries.map(([reason, n]) => `${n} ${reason}`).join(', ');
}

/** @param {number} n */
function count(n) {
  return n.toLocaleString('en-US');
}

/** @param {number} cents */
function money(cents) {
  return `$${(cents / 100).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}
