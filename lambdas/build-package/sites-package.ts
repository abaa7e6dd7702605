// The subject package of a request over several sites: each site's own package in its folder, and a front page naming every site and which held no data.
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import yauzl from 'yauzl';
import yazl from 'yazl';
import { InvalidArchiveError, LedgerStateError } from '#shared/errors';
import type { LedgerItem, SubjectPackageFacts } from '#shared/ledger';
import { siteRequestId } from '#shared/sites';
import type { StepDeps } from '#shared/step-deps';
import { packageKey, withScratchDir } from './build-package.ts';
import { packageFileName } from './package-zip.ts';
import { escapeHtml, pageHead } from './render.ts';
import { PACKAGE_PLACEHOLDERS } from './settings.ts';
import { measured } from './streams.ts';
import { stringsFor } from './strings.ts';

/** Where each site's own package goes inside the request's package. */
export function siteFolder(site: string): string {
  return `sites/${site}/`;
}

/** One site of the request as its package states it. */
export interface SiteSection {
  readonly site: string;
  readonly name: string;
  /** The package that site's part built: undefined where the site held no data about the subject. */
  readonly package: SubjectPackageFacts | undefined;
}

/**
 * Builds the package of an access request over several sites once every part has completed, and
 * stores it at the request's own package key: each site's package (re-checked against the SHA-256
 * its part recorded as it is read) copied entry by entry into `sites/<site>/`, and a front page
 * (index.html, README.txt, sites.json) that names every site with the name the configuration gives
 * it, links to each site's page and says which sites held no data. Nothing in it depends on when it
 * is built: its time is the latest part's end, so two builds of one request (two parts ending at
 * once) store the same bytes. Answers the facts the request's ledger item records, or undefined
 * where no site held data (there is nothing to hand over, as for one site's no_data).
 */
export async function buildSitesPackage(
  deps: Pick<StepDeps, 'archive' | 'subjectPackage' | 'ledger'>,
  request: LedgerItem,
): Promise<SubjectPackageFacts | undefined> {
  const settings = deps.subjectPackage ?? { ...PACKAGE_PLACEHOLDERS, timeZone: 'UTC' };
  const names = new Map((settings.sites ?? []).map((site) => [site.id, site.name]));
  const sections: SiteSection[] = [];
  let answeredAt = '';
  for (const site of request.sites ?? []) {
    const part = await deps.ledger.require(siteRequestId(request.request_id, site));
    if (part.status !== 'completed') {
      throw new LedgerStateError(
        `the part of site ${site} has not completed; its package cannot be built yet`,
      );
    }
    if (part.outcome === 'exported' && part.subject_package === undefined) {
      throw new LedgerStateError(`the part of site ${site} exported data but recorded no package`);
    }
    sections.push({ site, name: names.get(site) ?? site, package: part.subject_package });
    const at = part.completed_at ?? part.updated_at;
    if (at > answeredAt) answeredAt = at;
  }
  if (!sections.some((section) => section.package !== undefined)) return undefined;
  const answered = new Date(answeredAt);
  const fileName = packageFileName(answered, settings.timeZone);
  const key = packageKey(request.request_id);
  return await withScratchDir(async (dir) => {
    const opened: yauzl.ZipFile[] = [];
    try {
      const copies: { section: SiteSection; file: yauzl.ZipFile; entries: yauzl.Entry[] }[] = [];
      for (const section of sections) {
        const built = section.package;
        if (built === undefined) continue;
        const path = join(dir, `${section.site}.zip`);
        await pipeline(
          await deps.archive.read(built.key, {
            bytes: built.bytes,
            sha256: built.sha256,
            ...(built.version_id === undefined ? {} : { versionId: built.version_id }),
          }),
          createWriteStream(path),
        );
        const file = await openPackage(path, section.site);
        opened.push(file);
        copies.push({ section, file, entries: await entriesOf(file, section.site) });
      }
      const zip = new yazl.ZipFile();
      const output = new PassThrough();
      const fail = (error: unknown) =>
        output.destroy(error instanceof Error ? error : new Error(String(error)));
      zip.on('error', fail);
      const options = { mtime: answered, mode: 0o100644 };
      const front = frontPage(sections, { ...settings, answered });
      zip.addBuffer(Buffer.from(front.html, 'utf8'), 'index.html', options);
      zip.addBuffer(Buffer.from(front.readme, 'utf8'), 'README.txt', options);
      zip.addBuffer(Buffer.from(front.json, 'utf8'), 'sites.json', options);
      for (const { section, file, entries } of copies) {
        for (const entry of entries) {
          zip.addReadStreamLazy(`${siteFolder(section.site)}${entry.fileName}`, options, (callback) => {
            file.openReadStream(entry, (error, stream) => {
              if (error !== null) {
                fail(
                  new InvalidArchiveError(
                    `an entry of the package of site ${section.site} could not be read`,
                  ),
                );
                return;
              }
              callback(null, (stream as Readable).once('error', fail));
            });
          });
        }
      }
      zip.end();
      zip.outputStream.once('error', fail).pipe(output);
      const body = measured(output, 'package');
      const { versionId } = await deps.archive.storePackage(key, body.body, fileName);
      const { bytes, sha256 } = body.result();
      const details = sections.map((section) => section.package?.conversation_details);
      return {
        key,
        bytes,
        sha256,
        ...(versionId === undefined ? {} : { version_id: versionId }),
        file_name: fileName,
        built_at: answered.toISOString(),
        // The least complete of the sites' conversation details.
        conversation_details: details.includes('unavailable')
          ? 'unavailable'
          : details.includes('partial')
            ? 'partial'
            : 'complete',
        sites: sections.map((section) => ({ site: section.site, held_data: section.package !== undefined })),
      };
    } finally {
      for (const file of opened) file.close();
    }
  });
}

async function openPackage(path: string, site: string): Promise<yauzl.ZipFile> {
  try {
    return await new Promise<yauzl.ZipFile>((resolve, reject) =>
      yauzl.open(path, { lazyEntries: true, autoClose: false, validateEntrySizes: true }, (error, zip) =>
        error === null ? resolve(zip) : reject(error),
      ),
    );
  } catch {
    throw new InvalidArchiveError(`the stored package of site ${site} is not a readable zip`);
  }
}

/** A site package's entries: files only, each a plain relative name (the package step wrote them). */
async function entriesOf(file: yauzl.ZipFile, site: string): Promise<yauzl.Entry[]> {
  const entries: yauzl.Entry[] = [];
  try {
    for await (const entry of file.eachEntry()) {
      if (entry.fileName.endsWith('/')) continue;
      entries.push(entry);
    }
  } catch {
    throw new InvalidArchiveError(`an entry of the package of site ${site} could not be read`);
  }
  const unsafe = entries.find(
    (entry) => entry.fileName.startsWith('/') || entry.fileName.split('/').includes('..'),
  );
  if (unsafe !== undefined)
    throw new InvalidArchiveError(`the package of site ${site} holds an unsafe entry name`);
  return entries;
}

/** index.html, README.txt and sites.json of the package: every site by name, and where its data is. */
export function frontPage(
  sections: readonly SiteSection[],
  facts: {
    readonly controllerName: string;
    readonly controllerContact: string;
    readonly language: string;
    readonly timeZone: string;
    readonly answered: Date;
  },
): { html: string; readme: string; json: string } {
  const strings = stringsFor(facts.language);
  const held = sections.filter((section) => section.package !== undefined);
  const none = sections.filter((section) => section.package === undefined);
  const answered = new Intl.DateTimeFormat(facts.language, {
    dateStyle: 'long',
    timeZone: facts.timeZone,
  }).format(facts.answered);
  const html = [
    ...pageHead(facts.language, `${strings.title} · ${facts.controllerName}`),
    '<body>',
    '<header>',
    `<h1>${escapeHtml(strings.title)}</h1>`,
    `<p>${escapeHtml(strings.sites.intro(facts.controllerName))}</p>`,
    `<p class="meta">${escapeHtml(strings.controller)}: ${escapeHtml(facts.controllerName)} · ${escapeHtml(strings.contact)}: ${escapeHtml(facts.controllerContact)} · ${escapeHtml(strings.answered)}: <time datetime="${facts.answered.toISOString()}">${escapeHtml(answered)}</time></p>`,
    '</header>',
    '<main id="main">',
    '<section aria-labelledby="held-heading">',
    `<h2 id="held-heading">${escapeHtml(strings.sites.heldHeading)}</h2>`,
    '<ul>',
    ...held.map(
      (section) =>
        `<li><a href="${escapeHtml(`${siteFolder(section.site)}index.html`)}">${escapeHtml(strings.sites.openSite(section.name))}</a></li>`,
    ),
    '</ul>',
    '</section>',
    '<section aria-labelledby="none-heading">',
    `<h2 id="none-heading">${escapeHtml(strings.sites.noneHeading)}</h2>`,
    ...(none.length === 0
      ? [`<p>${escapeHtml(strings.sites.noneHeld)}</p>`]
      : [
          `<p>${escapeHtml(strings.sites.noneIntro)}</p>`,
          '<ul>',
          ...none.map((section) => `<li>${escapeHtml(section.name)}</li>`),
          '</ul>',
        ]),
    '</section>',
    '</main>',
    '</body>',
    '</html>',
    '',
  ].join('\n');
  const readme = strings.sites.readme({
    controller: facts.controllerName,
    contact: facts.controllerContact,
    answered,
    held: held.map((section) => ({ name: section.name, folder: siteFolder(section.site) })),
    none: none.map((section) => section.name),
  });
  const json = `${JSON.stringify(
    {
      controller: { name: facts.controllerName, contact: facts.controllerContact },
      answered_at: facts.answered.toISOString(),
      sites: sections.map((section) => ({
        id: section.site,
        name: section.name,
        held_data: section.package !== undefined,
        folder: section.package === undefined ? null : siteFolder(section.site),
      })),
    },
    null,
    2,
  )}\n`;
  return { html, readme, json };
}
