// The subject package's index.html: its frame, the lists of comments, likes and dislikes, escaping.
import type {
  PackageComment,
  PackageConversation,
  PackageVote,
  SubjectPackageData,
} from './package-schema.ts';
import type { CcpaNotice, GdprNotice } from './settings.ts';
import { type PackageStrings, type ProfileField, stringsFor } from './strings.ts';

/** The package without its three lists: what the page says around them. */
export type PackageHead = Omit<SubjectPackageData, 'conversations' | 'likes' | 'dislikes'>;

/** How long the three lists are: the page states the counts before the lists. */
export interface PackageCounts {
  readonly comments: number;
  readonly conversations: number;
  readonly likes: number;
  readonly dislikes: number;
}

/** Where a list goes in the page's frame. */
export interface PageSlot {
  readonly slot: 'conversations' | 'likes' | 'dislikes';
}

/** A line of the page, or the place of a list. */
export type PageLine = string | PageSlot;

/** One comment as the page shows it, with its conversation. Comments of a conversation come together. */
export interface CommentEntry {
  readonly conversation: Omit<PackageConversation, 'comments'>;
  readonly comment: PackageComment;
  /**
   * For a reply to one of the subject's own comments in the same conversation, that comment's
   * time; else null (the page then says it answers someone else).
   */
  readonly parentWrittenAt: string | null;
}

/**
 * index.html of the subject package: one self-contained page. No scripts, no external resources
 * (the Content-Security-Policy forbids both, should anything slip through), so it opens offline
 * and from a mail attachment alike. Every value that came from the platform or the config goes
 * through `escapeHtml`; text the subject wrote is isolated (`dir="auto"`) so right-to-left text
 * and bidi control characters cannot reorder the page around it.
 *
 * This renders a package held in memory; the package step streams the same lines through
 * `PageText` (package-zip.ts), so a page of a million comments is never a string whole.
 */
export function renderIndexHtml(data: SubjectPackageData): string {
  const { conversations, likes, dislikes, ...head } = data;
  const text = new PageText(head);
  const counts: PackageCounts = {
    comments: conversations.reduce((sum, c) => sum + c.comments.length, 0),
    conversations: conversations.length,
    likes: likes.length,
    dislikes: dislikes.length,
  };
  const out: string[] = [];
  for (const line of text.frame(counts)) {
    if (typeof line === 'string') out.push(line);
    else if (line.slot === 'conversations') {
      for (const conversation of conversations) {
        out.push(...text.conversationOpen(conversation));
        for (const entry of commentEntries(conversation)) out.push(...text.comment(entry));
        out.push(text.conversationClose());
      }
    } else {
      for (const vote of line.slot === 'likes' ? likes : dislikes) out.push(text.vote(vote));
    }
  }
  out.push('');
  return out.join('\n');
}

/** A conversation's comments with their parents' times, as `CommentEntry` carries them. */
export function commentEntries(conversation: PackageConversation): CommentEntry[] {
  const { comments, ...header } = conversation;
  const byId = new Map(comments.map((comment) => [comment.id, comment]));
  return comments.map((comment) => {
    const parent = comment.reply_to === null ? undefined : byId.get(comment.reply_to);
    return { conversation: header, comment, parentWrittenAt: parent?.written_at ?? null };
  });
}

/**
 * The page's lines, piece by piece: the frame around the lists, then each conversation, comment
 * and vote. Joined with newlines, in the frame's order, they are index.html.
 */
export class PageText {
  readonly #page: Page;

  constructor(head: PackageHead) {
    this.#page = {
      data: head,
      strings: stringsFor(head.language),
      dates: dateFormatters(head.language, head.time_zone),
      counts: { comments: 0, conversations: 0, likes: 0, dislikes: 0 },
      out: [],
    };
  }

  /** Every line of the page, with a slot where each list goes. */
  frame(counts: PackageCounts): PageLine[] {
    const page: Page = { ...this.#page, counts, out: [] };
    const { data, strings, out } = page;
    out.push(
      ...pageHead(data.language, `${strings.title} · ${data.controller.name}`),
      '<body>',
      `<a class="skip" href="#main">${escapeHtml(strings.skipToContent)}</a>`,
      '<header>',
      `<h1>${escapeHtml(strings.title)}</h1>`,
      `<p>${escapeHtml(strings.intro)}</p>`,
      '</header>',
    );
    out.push(
      `<nav aria-labelledby="contents-heading"><h2 id="contents-heading">${escapeHtml(strings.contentsHeading)}</h2><ol>`,
      ...SECTIONS.map(({ id, heading }) => `<li><a href="#${id}">${escapeHtml(heading(strings))}</a></li>`),
      '</ol></nav>',
      '<main id="main">',
    );
    for (const { id, heading, render } of SECTIONS) {
      out.push(section(id, heading(strings)));
      render(page);
      out.push('</section>');
    }
    out.push('</main>');
    out.push(`<footer><p>${escapeHtml(strings.footer)}</p></footer>`, '</body>', '</html>');
    return out;
  }

  /** The lines that open a conversation. */
  conversationOpen(conversation: Omit<PackageConversation, 'comments'>): string[] {
    const { strings } = this.#page;
    const out: string[] = [];
    const title = conversation.title === null || conversation.title.trim() === '' ? null : conversation.title;
    out.push(
      '<section class="conversation">',
      title === null
        ? `<h3>${escapeHtml(strings.conversationUntitled)}</h3>`
        : `<h3 dir="auto">${escapeHtml(title)}</h3>`,
      `<p class="note">${escapeHtml(strings.conversationId(conversation.conversation_id))}</p>`,
    );
    if (conversation.url !== null) {
      out.push(
        `<p><a href="${escapeHtml(conversation.url)}" rel="noreferrer noopener">${escapeHtml(strings.conversationLink)}</a> <span class="url">${escapeHtml(conversation.url)}</span></p>`,
      );
    }
    return out;
  }

  /** The line that closes a conversation. */
  conversationClose(): string {
    return '</section>';
  }

  /** A comment's lines. */
  comment({ comment, parentWrittenAt }: CommentEntry): string[] {
    const { strings, dates } = this.#page;
    const out: string[] = [];
    const facts = [
      `<strong>${escapeHtml(strings.commentKind[comment.kind])}</strong>`,
      time(comment.written_at, dates.moment),
      `<span class="state state-${comment.state}">${escapeHtml(strings.states[comment.state])}</span>`,
    ];
    if (comment.edited) facts.push(escapeHtml(strings.edited));
    if (comment.moderation !== null) facts.push(escapeHtml(strings.moderationStatus(comment.moderation)));
    out.push(`<article class="comment"><p class="meta">${facts.join(' · ')}</p>`);
    if (comment.kind === 'reply') {
      out.push(
        `<p class="note">${escapeHtml(parentWrittenAt === null ? strings.replyToOther : strings.replyToOwn(dates.moment.format(new Date(parentWrittenAt))))}</p>`,
      );
    }
    out.push(
      comment.text === ''
        ? `<p class="text">${escapeHtml(strings.emptyComment)}</p>`
        : `<p class="text" dir="auto">${escapeHtml(comment.text)}</p>`,
    );
    if (comment.ip !== null) out.push(`<p class="note">${escapeHtml(strings.ipAddress(comment.ip))}</p>`);
    out.push('</article>');
    return out;
  }

  /** A like's or dislike's line. */
  vote(vote: PackageVote): string {
    const { strings } = this.#page;
    const text =
      vote.conversation_id === null
        ? strings.voteOnOther(vote.message_id)
        : strings.voteOnOwn(vote.conversation_title ?? strings.conversationId(vote.conversation_id));
    return `<li dir="auto">${escapeHtml(text)}</li>`;
  }
}

/** What each section renders from: the package head, the lists' counts, its language's strings and dates, and the lines so far. */
interface Page {
  readonly data: PackageHead;
  readonly counts: PackageCounts;
  readonly strings: PackageStrings;
  readonly dates: DateFormatters;
  readonly out: PageLine[];
}

/** The page's sections in order: the contents list and the page are both made from this list. */
const SECTIONS: readonly {
  readonly id: string;
  readonly heading: (strings: PackageStrings) => string;
  readonly render: (page: Page) => void;
}[] = [
  { id: 'who', heading: (s) => s.whoHeading, render: renderWho },
  { id: 'information', heading: (s) => s.informationHeading, render: renderInformation },
  { id: 'profile', heading: (s) => s.profileHeading, render: renderProfile },
  { id: 'roles', heading: (s) => s.rolesHeading, render: renderRoles },
  { id: 'settings', heading: (s) => s.settingsHeading, render: renderSettings },
  { id: 'comments', heading: (s) => s.commentsHeading, render: renderComments },
  { id: 'votes', heading: (s) => s.votesHeading, render: renderVoteSection },
  { id: 'glossary', heading: (s) => s.glossaryHeading, render: renderGlossary },
  { id: 'files', heading: (s) => s.filesHeading, render: renderFiles },
];

/** Who answers, and when. */
function renderWho({ data, strings, dates, out }: Page): void {
  out.push(
    '<dl>',
    row(strings.controller, escapeHtml(data.controller.name)),
    row(strings.contact, escapeHtml(data.controller.contact)),
    row(strings.requestReceived, time(data.request.received_at, dates.day)),
    row(strings.answered, time(data.request.answered_at, dates.day)),
    row(strings.regulationLabel, escapeHtml(strings.regulation[data.request.regulation])),
    row(strings.requestReference, `<code>${escapeHtml(data.request.request_id)}</code>`),
    '</dl>',
    `<p class="note">${escapeHtml(strings.timeZoneNote(data.time_zone))}</p>`,
  );
}

/** What the request's law says the subject is told: GDPR Art. 15(1) and 15(2), or CCPA §1798.110. */
function renderInformation({ data, strings, out }: Page): void {
  const information = data.information;
  let items: (readonly [string, string])[];
  if ('gdpr' in information) {
    const notice = information.gdpr;
    items = GDPR_ORDER.map((key) => [strings.information.gdpr[key], notice[key]] as const);
  } else {
    const notice = information.ccpa;
    items = CCPA_ORDER.map((key) => [strings.information.ccpa[key], notice[key]] as const);
  }
  for (const [heading, text] of items) out.push(`<h3>${escapeHtml(heading)}</h3>`, paragraphs(text));
}

function renderProfile({ data, strings, out }: Page): void {
  out.push('<dl>');
  for (const [field, value] of profileRows(data, strings)) {
    out.push(row(strings.profile[field], value));
  }
  out.push('</dl>');
}

function renderRoles({ data, strings, out }: Page): void {
  out.push(`<p>${escapeHtml(strings.rolesIntro)}</p>`);
  if (data.roles.length === 0) {
    out.push(`<p>${escapeHtml(strings.noRoles)}</p>`);
    return;
  }
  out.push('<ul>');
  for (const role of data.roles) {
    const explained = strings.roleNames[role.role] ?? strings.roleUnknown(role.role);
    const scope =
      role.scope === 'platform' ? strings.roleScopePlatform : strings.roleScopeSite(role.site ?? '');
    out.push(`<li>${escapeHtml(explained)} <span class="note">(${escapeHtml(scope)})</span></li>`);
  }
  out.push('</ul>');
}

function renderSettings({ data, strings, out }: Page): void {
  if (data.settings.length === 0) {
    const none = data.settings_source === 'unavailable' ? strings.settingsUnavailable : strings.settingsNone;
    out.push(`<p>${escapeHtml(none)}</p>`);
    return;
  }
  out.push(`<p>${escapeHtml(strings.settingsIntro)}</p><dl>`);
  for (const setting of data.settings) {
    const kind = strings.notificationKinds[setting.kind] ?? setting.kind;
    const value = strings.notificationValues[setting.value] ?? setting.value;
    const shown = setting.default ? `${value} ${strings.settingDefault}` : value;
    out.push(row(`${strings.notificationChannels[setting.channel]}: ${kind}`, escapeHtml(shown)));
  }
  out.push('</dl>');
}

function renderComments({ data, counts, strings, out }: Page): void {
  const details = data.conversation_details;
  if (details.status === 'unavailable' && details.reason !== null) {
    out.push(`<p class="notice" role="note">${escapeHtml(strings.detailsUnavailable[details.reason])}</p>`);
  } else if (details.status === 'partial') {
    out.push(`<p class="notice" role="note">${escapeHtml(strings.detailsPartial)}</p>`);
  }
  if (counts.comments === 0) {
    out.push(`<p>${escapeHtml(strings.noComments)}</p>`);
    return;
  }
  out.push(`<p>${escapeHtml(strings.commentsSummary(counts.comments, counts.conversations))}</p>`);
  out.push({ slot: 'conversations' });
}

/** Likes and dislikes. */
function renderVoteSection({ counts, strings, out }: Page): void {
  out.push(`<p>${escapeHtml(strings.votesIntro)}</p>`);
  for (const slot of ['likes', 'dislikes'] as const) {
    const count = counts[slot];
    out.push(
      `<h3>${escapeHtml(slot === 'likes' ? strings.likesHeading(count) : strings.dislikesHeading(count))}</h3>`,
    );
    if (count === 0) out.push(`<p>${escapeHtml(strings.noVotes)}</p>`);
    else out.push('<ul>', { slot }, '</ul>');
  }
}

function renderGlossary({ strings, out }: Page): void {
  out.push(`<p>${escapeHtml(strings.glossaryIntro)}</p>`, '<dl class="glossary">');
  for (const [field, meaning] of Object.entries(strings.glossary)) {
    out.push(row(field, escapeHtml(meaning), true));
  }
  out.push('</dl>');
}

/** The platform's original files, each with its size and SHA-256. */
function renderFiles({ data, strings, out }: Page): void {
  out.push(`<p>${escapeHtml(strings.filesIntro)}</p>`, '<ul class="files">');
  for (const file of data.platform_files) {
    out.push(
      `<li><code>${escapeHtml(file.name)}</code>: ${file.bytes} bytes, SHA-256 <code class="hash">${escapeHtml(file.sha256)}</code></li>`,
    );
  }
  out.push('</ul>');
}

/** Art. 15(1)(a)-(h), then 15(2). */
const GDPR_ORDER: readonly (keyof GdprNotice)[] = [
  'purposes',
  'categories',
  'recipients',
  'retention',
  'rights',
  'complaint',
  'source',
  'automatedDecisions',
  'transfers',
];

/** §1798.110(a)(1)-(4). */
const CCPA_ORDER: readonly (keyof CcpaNotice)[] = ['categories', 'sources', 'purposes', 'thirdParties'];

interface DateFormatters {
  readonly day: Intl.DateTimeFormat;
  readonly moment: Intl.DateTimeFormat;
}

function dateFormatters(language: string, timeZone: string): DateFormatters {
  return {
    day: new Intl.DateTimeFormat(language, { dateStyle: 'long', timeZone }),
    moment: new Intl.DateTimeFormat(language, { dateStyle: 'long', timeStyle: 'short', timeZone }),
  };
}

function profileRows(data: PackageHead, strings: PackageStrings): [ProfileField, string][] {
  const { profile } = data;
  const text = (value: string | null) =>
    value === null
      ? `<span class="note">${escapeHtml(strings.notRecorded)}</span>`
      : `<bdi>${escapeHtml(value)}</bdi>`;
  const flag = (value: boolean | null) =>
    escapeHtml(value === null ? strings.notRecorded : value ? strings.yes : strings.no);
  return [
    ['userName', profile.user_name === null ? text(null) : text(`@${profile.user_name}`)],
    ['displayName', text(profile.display_name)],
    ['about', text(profile.about)],
    ['location', text(profile.location)],
    ['email', text(profile.email)],
    ['emailVerified', flag(profile.email_verified)],
    ['gender', text(profile.gender)],
    ['birthday', text(profile.birthday)],
    ['image', text(profile.image_id)],
    ['registered', flag(profile.registered)],
    ['singleSignOn', flag(profile.single_sign_on)],
    ['socialAccounts', escapeHtml(strings.socialAccounts(profile.social_accounts))],
    ['privateProfile', flag(profile.private_profile)],
    ['subscriber', flag(profile.subscriber)],
    ['platformUserId', text(profile.platform_user_id)],
  ];
}

function section(id: string, heading: string): string {
  return `<section id="${id}" aria-labelledby="${id}-heading"><h2 id="${id}-heading">${escapeHtml(heading)}</h2>`;
}

/** A definition-list row; `valueHtml` is already escaped. */
function row(term: string, valueHtml: string, code = false): string {
  const label = code ? `<code>${escapeHtml(term)}</code>` : escapeHtml(term);
  return `<div class="row"><dt>${label}</dt><dd>${valueHtml}</dd></div>`;
}

function time(iso: string, format: Intl.DateTimeFormat): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return escapeHtml(iso);
  return `<time datetime="${escapeHtml(date.toISOString())}">${escapeHtml(format.format(date))}</time>`;
}

/** Config text: blank lines separate paragraphs. */
function paragraphs(text: string): string {
  return text
    .split(/\n\s*\n/)
    .map((paragraph) => paragraph.trim())
    .filter((paragraph) => paragraph !== '')
    .map((paragraph) => `<p class="text">${escapeHtml(paragraph)}</p>`)
    .join('\n');
}

/**
 * The opening of every page of a package, to the end of its head: no script, nothing loaded from
 * anywhere (the Content-Security-Policy), no referrer, the page's own style.
 */
export function pageHead(language: string, title: string): string[] {
  return [
    '<!DOCTYPE html>',
    `<html lang="${escapeHtml(language)}">`,
    '<head>',
    '<meta charset="utf-8">',
    `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'">`,
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    '<meta name="referrer" content="no-referrer">',
    `<title>${escapeHtml(title)}</title>`,
    `<style>${PAGE_STYLE}</style>`,
    '</head>',
  ];
}

const HTML_ESCAPES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/**
 * Text as HTML text or attribute value. Characters HTML cannot carry (NUL and the other C0/C1
 * controls except tab and newlines, lone surrogates) become U+FFFD, so no byte of the input can
 * change how the page parses.
 */
export function escapeHtml(value: string): string {
  return value
    .replace(/[&<>"']/g, (character) => HTML_ESCAPES[character] ?? character)
    .replace(CONTROL_CHARACTERS, '\uFFFD')
    .replace(LONE_SURROGATES, '\uFFFD');
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: replacing control characters is the point.
const CONTROL_CHARACTERS = /[\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]/g;
const LONE_SURROGATES = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/**
 * The page's colours. Each text colour is meant for the white background (the notice text for the
 * notice's own), at 7:1 or more (WCAG AAA); a test computes the ratios.
 */
export const PAGE_COLOURS = {
  background: '#ffffff',
  text: '#1a1a1a',
  muted: '#4a4a4a',
  link: '#0b4bb3',
  deleted: '#8a1c1c',
  held: '#6b4100',
  noticeBackground: '#fff4e5',
  rule: '#d0d0d0',
  focus: '#b35900',
} as const;

const C = PAGE_COLOURS;

/** Readable on a phone (fluid width, wrapping long words), printable (no navigation, link targets written out). */
const PAGE_STYLE = [
  ':root{color-scheme:light}',
  `body{font:1rem/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:${C.text};background:${C.background};max-width:46rem;margin:0 auto;padding:1rem}`,
  `h1{font-size:1.8rem}h2{font-size:1.4rem;border-bottom:2px solid ${C.text};margin-top:2.5rem}h3{font-size:1.1rem;margin-bottom:.25rem}`,
  `a{color:${C.link}}a:focus{outline:3px solid ${C.focus};outline-offset:2px}`,
  '.skip{position:absolute;left:-100rem}.skip:focus{position:static}',
  `dl .row{display:flex;flex-wrap:wrap;gap:0 1rem;padding:.25rem 0;border-bottom:1px solid ${C.rule}}`,
  'dt{font-weight:600;min-width:14rem}dd{margin:0;overflow-wrap:anywhere}',
  `.note,.meta,.url{color:${C.muted};font-size:.92rem}`,
  `.notice{border-left:4px solid ${C.focus};background:${C.noticeBackground};padding:.5rem .75rem}`,
  `.conversation{border-top:1px solid ${C.rule};margin-top:1.5rem;content-visibility:auto;contain-intrinsic-size:auto 20rem}`,
  `.comment{margin:.75rem 0 .75rem .5rem;padding-left:.75rem;border-left:3px solid ${C.rule}}`,
  '.text{white-space:pre-wrap;overflow-wrap:anywhere;unicode-bidi:isolate}',
  '.url,code{overflow-wrap:anywhere}.hash{font-size:.85rem}',
  `.state-deleted{color:${C.deleted};font-weight:600}.state-unpublished{color:${C.held};font-weight:600}`,
  '@media print{nav,.skip{display:none}body{max-width:none}.conversation{content-visibility:visible}a[href^="http"]::after{content:" (" attr(href) ")"}}',
].join('');
