/** The ATOM and XML pieces the administration API's entities and rules share. */

export const ATOM = 'http://www.w3.org/2005/Atom';
export const CONNECT = 'http://schemas.microsoft.com/netservices/2010/10/servicebus/connect';
/** Reported as every entity's creation and update time. */
export const STARTED = new Date().toISOString();

/** The flat leaf elements of a description (`<LockDuration>PT1M</LockDuration>` → LockDuration). */
export function leaves(body: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const match of body.matchAll(/<(?:\w+:)?(\w+)(?:\s[^>]*)?>([^<]*)<\/(?:\w+:)?\1>/g)) {
    out[match[1]!] = unescapeXml(match[2]!);
  }
  return out;
}

export function entry(base: string, path: string, description: string, root: boolean): string {
  // Not percent-encoded: the client reads the names back from this URL's path as is ($Default).
  const id = `${base}/${path}`;
  const title = escapeXml(path.split('/').pop()!);
  return (
    `${root ? '<?xml version="1.0" encoding="utf-8"?>' : ''}<entry${root ? ` xmlns="${ATOM}"` : ''}>` +
    `<id>${escapeXml(id)}</id><title type="text">${title}</title><published>${STARTED}</published>` +
    `<updated>${STARTED}</updated><link rel="self" href="${escapeXml(id)}"/>` +
    `<content type="application/xml">${description}</content></entry>`
  );
}

export function escapeXml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

export function unescapeXml(text: string): string {
  return text
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&apos;/g, "'")
    .replace(/&amp;/g, '&');
}
