/**
 * SQS's query protocol: `Action=<Op>` with form-encoded parameters in, XML out, as older SDKs and
 * aws-cli 2.9 speak it (real SQS answers both this and JSON). A query request is turned into the
 * JSON input the operations take (`Attribute.1.Name` into `Attributes`, `AttributeName.1` into
 * `AttributeNames`, `SendMessageBatchRequestEntry.1.Id` into `Entries`...), and the JSON answer
 * into the XML the query protocol gives (flattened lists: one `<Message>`, `<Attribute>` or
 * `<QueueUrl>` element per item).
 */
import { randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';

const XMLNS = 'http://queue.amazonaws.com/doc/2012-11-05/';

/** `AttributeName.1=...` lists, by their query name; the JSON name adds an `s`. */
const LIST_PARAMETERS = new Set(['AttributeName', 'MessageAttributeName', 'MessageSystemAttributeName']);
/** `<Map>.1.Name` / `<Map>.1.Value` maps, by query name, with the JSON name and the entry's key field. */
const MAP_PARAMETERS: Readonly<Record<string, { readonly json: string; readonly key: string }>> = {
  Attribute: { json: 'Attributes', key: 'Name' },
  MessageAttribute: { json: 'MessageAttributes', key: 'Name' },
  MessageSystemAttribute: { json: 'MessageSystemAttributes', key: 'Name' },
  Tag: { json: 'Tags', key: 'Key' },
};
const NUMBER_PARAMETERS = new Set([
  'DelaySeconds',
  'MaxNumberOfMessages',
  'WaitTimeSeconds',
  'VisibilityTimeout',
  'MaxResults',
]);

type Tree = { [name: string]: Tree | string };

/** `a.b.c=v` pairs as a tree of objects. */
function treeOf(params: URLSearchParams): Tree {
  const root: Tree = {};
  for (const [name, value] of params) {
    const path = name.split('.');
    let node = root;
    for (const [index, part] of path.entries()) {
      if (index === path.length - 1) {
        node[part] = value;
      } else {
        const next = node[part];
        const child: Tree = typeof next === 'object' ? next : {};
        node[part] = child;
        node = child;
      }
    }
  }
  return root;
}

/** The numbered children of a node (`1`, `2`, ...), in number order. */
function numbered(node: Tree | string | undefined): (Tree | string)[] {
  if (node === undefined || typeof node === 'string') return [];
  return Object.entries(node)
    .filter(([index]) => /^\d+$/.test(index))
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([, child]) => child);
}

function toJson(node: Tree): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(node)) {
    if (name === 'Action' || name === 'Version') continue;
    if (LIST_PARAMETERS.has(name)) {
      out[`${name}s`] = numbered(value).map(String);
      continue;
    }
    const map = MAP_PARAMETERS[name];
    if (map !== undefined) {
      const entries: Record<string, unknown> = {};
      for (const entry of numbered(value)) {
        if (typeof entry === 'string') continue;
        const key = entry[map.key];
        const entryValue = entry.Value;
        if (typeof key !== 'string' || entryValue === undefined) continue;
        entries[key] = typeof entryValue === 'string' ? entryValue : toJson(entryValue);
      }
      out[map.json] = entries;
      continue;
    }
    if (name.endsWith('RequestEntry')) {
      out.Entries = numbered(value).map((entry) => (typeof entry === 'string' ? entry : toJson(entry)));
      continue;
    }
    if (typeof value === 'string') out[name] = NUMBER_PARAMETERS.has(name) ? Number(value) : value;
    else out[name] = toJson(value);
  }
  return out;
}

/** The operation a query request names, and its input as the JSON protocol would carry it. */
export function parseQueryRequest(params: URLSearchParams): {
  action: string;
  input: Record<string, unknown>;
} {
  return { action: params.get('Action') ?? '', input: toJson(treeOf(params)) };
}

const XML_ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
  '\r': '&#xD;',
};

function xmlEscape(text: string): string {
  return text.replace(/[&<>"'\r]/g, (char) => XML_ESCAPES[char] ?? char);
}

/** A list field of an answer, by JSON name: the element each item becomes. */
function listElement(operation: string, field: string): string | undefined {
  if (field === 'Messages') return 'Message';
  if (field === 'QueueUrls') return 'QueueUrl';
  if (field === 'Successful') return `${operation}ResultEntry`;
  if (field === 'Failed') return 'BatchResultErrorEntry';
  return undefined;
}

/** A map field of an answer, by JSON name: the element each entry becomes and its key's name. */
const MAP_ELEMENTS: Readonly<Record<string, { readonly element: string; readonly key: string }>> = {
  Attributes: { element: 'Attribute', key: 'Name' },
  MessageAttributes: { element: 'MessageAttribute', key: 'Name' },
  Tags: { element: 'Tag', key: 'Key' },
};

function toXml(operation: string, value: Readonly<Record<string, unknown>>): string {
  let xml = '';
  for (const [field, item] of Object.entries(value)) {
    if (item === undefined || item === null) continue;
    const each = listElement(operation, field);
    const map = MAP_ELEMENTS[field];
    if (Array.isArray(item) && each !== undefined) {
      for (const entry of item) {
        xml +=
          typeof entry === 'object' && entry !== null
            ? `<${each}>${toXml(operation, entry as Record<string, unknown>)}</${each}>`
            : `<${each}>${xmlEscape(String(entry))}</${each}>`;
      }
    } else if (map !== undefined && typeof item === 'object') {
      for (const [key, entryValue] of Object.entries(item)) {
        const rendered =
          typeof entryValue === 'object' && entryValue !== null
            ? toXml(operation, entryValue as Record<string, unknown>)
            : xmlEscape(String(entryValue));
        xml += `<${map.element}><${map.key}>${xmlEscape(key)}</${map.key}><Value>${rendered}</Value></${map.element}>`;
      }
    } else if (typeof item === 'object') {
      xml += `<${field}>${toXml(operation, item as Record<string, unknown>)}</${field}>`;
    } else {
      xml += `<${field}>${xmlEscape(String(item))}</${field}>`;
    }
  }
  return xml;
}

function sendXml(response: ServerResponse, status: number, body: string): void {
  const text = `<?xml version="1.0"?>${body}`;
  response.writeHead(status, { 'content-type': 'text/xml', 'content-length': Buffer.byteLength(text) });
  response.end(text);
}

/** Answers a query request with the operation's JSON answer as XML. */
export function replyQuery(response: ServerResponse, operation: string, output: unknown): void {
  const result =
    typeof output === 'object' && output !== null && Object.keys(output).length > 0
      ? `<${operation}Result>${toXml(operation, output as Record<string, unknown>)}</${operation}Result>`
      : '';
  sendXml(
    response,
    200,
    `<${operation}Response xmlns="${XMLNS}">${result}<ResponseMetadata><RequestId>${randomUUID()}</RequestId></ResponseMetadata></${operation}Response>`,
  );
}

/** Answers a query request with an error, under the code the query protocol uses for it. */
export function replyQueryFailure(
  response: ServerResponse,
  failure: { readonly queryCode: string; readonly message: string; readonly status: number },
): void {
  sendXml(
    response,
    failure.status,
    `<ErrorResponse xmlns="${XMLNS}"><Error><Type>Sender</Type><Code>${xmlEscape(failure.queryCode)}</Code><Message>${xmlEscape(failure.message)}</Message><Detail/></Error><RequestId>${randomUUID()}</RequestId></ErrorResponse>`,
  );
}
