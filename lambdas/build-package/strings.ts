// Every word of the subject package (page, README, glossary), one catalog per language.
import type { z } from 'zod';
import type { detailsReasonSchema } from './package-schema.ts';
import type { CcpaNotice, GdprNotice } from './settings.ts';

/**
 * Every word of the subject package (index.html, README.txt, the glossary) in one place, so a
 * translation is one more catalog of this shape: the type makes a catalog incomplete at compile
 * time. English is complete; a language without a catalog falls back to it (dates still follow
 * the controller's language).
 */

/** What a translator provides. Functions take already-formatted values. */
export interface PackageStrings {
  readonly title: string;
  readonly skipToContent: string;
  readonly intro: string;
  readonly contentsHeading: string;
  readonly whoHeading: string;
  readonly controller: string;
  readonly contact: string;
  readonly requestReceived: string;
  readonly answered: string;
  readonly requestReference: string;
  readonly regulation: Readonly<Record<'gdpr' | 'ccpa', string>>;
  readonly regulationLabel: string;
  readonly timeZoneNote: (timeZone: string) => string;
  readonly informationHeading: string;
  /** The headings of each law's notice items, each naming the provision it answers. */
  readonly information: {
    readonly gdpr: Readonly<Record<keyof GdprNotice, string>>;
    readonly ccpa: Readonly<Record<keyof CcpaNotice, string>>;
  };
  readonly profileHeading: string;
  readonly profile: Readonly<Record<ProfileField, string>>;
  readonly yes: string;
  readonly no: string;
  readonly notRecorded: string;
  readonly socialAccounts: (count: number) => string;
  readonly rolesHeading: string;
  readonly rolesIntro: string;
  readonly roleNames: Readonly<Record<string, string>>;
  readonly roleUnknown: (role: string) => string;
  readonly roleScopePlatform: string;
  readonly roleScopeSite: (site: string) => string;
  readonly noRoles: string;
  readonly settingsHeading: string;
  readonly settingsIntro: string;
  readonly settingsNone: string;
  readonly settingsUnavailable: string;
  readonly settingDefault: string;
  readonly notificationChannels: Readonly<Record<'email' | 'in_app', string>>;
  readonly notificationKinds: Readonly<Record<string, string>>;
  readonly notificationValues: Readonly<Record<string, string>>;
  readonly commentsHeading: string;
  readonly commentsSummary: (comments: number, conversations: number) => string;
  readonly noComments: string;
  readonly conversationUntitled: string;
  readonly conversationLink: string;
  readonly conversationId: (id: string) => string;
  readonly commentKind: Readonly<Record<'comment' | 'reply', string>>;
  readonly replyToOwn: (date: string) => string;
  readonly replyToOther: string;
  readonly states: Readonly<Record<'published' | 'unpublished' | 'deleted', string>>;
  readonly edited: string;
  readonly moderationStatus: (status: string) => string;
  readonly ipAddress: (ip: string) => string;
  readonly emptyComment: string;
  readonly detailsUnavailable: Readonly<Record<DetailsReason, string>>;
  readonly detailsPartial: string;
  readonly votesHeading: string;
  readonly votesIntro: string;
  readonly likesHeading: (count: number) => string;
  readonly dislikesHeading: (count: number) => string;
  readonly noVotes: string;
  readonly voteOnOwn: (title: string) => string;
  readonly voteOnOther: (id: string) => string;
  readonly glossaryHeading: string;
  readonly glossaryIntro: string;
  readonly glossary: Readonly<Record<string, string>>;
  readonly filesHeading: string;
  readonly filesIntro: string;
  readonly footer: string;
  readonly readme: (facts: ReadmeFacts) => string;
  /** The front page of a request answered over several sites (sites-package.ts). */
  readonly sites: SitesStrings;
}

/** The words of a package over several sites: which sites, each one's folder, which held nothing. */
export interface SitesStrings {
  readonly intro: (controller: string) => string;
  readonly heldHeading: string;
  readonly openSite: (site: string) => string;
  readonly noneHeading: string;
  readonly noneIntro: string;
  readonly noneHeld: string;
  readonly readme: (facts: SitesReadmeFacts) => string;
}

export interface SitesReadmeFacts {
  readonly controller: string;
  readonly contact: string;
  readonly answered: string;
  readonly held: readonly { readonly name: string; readonly folder: string }[];
  readonly none: readonly string[];
}

export type ProfileField =
  | 'userName'
  | 'displayName'
  | 'about'
  | 'location'
  | 'email'
  | 'emailVerified'
  | 'gender'
  | 'birthday'
  | 'image'
  | 'registered'
  | 'singleSignOn'
  | 'socialAccounts'
  | 'privateProfile'
  | 'subscriber'
  | 'platformUserId';

/** Why the conversation details (titles, links, deleted/edited states) may be missing. */
export type DetailsReason = z.infer<typeof detailsReasonSchema>;

export interface ReadmeFacts {
  readonly controller: string;
  readonly contact: string;
  readonly answered: string;
  readonly files: readonly { readonly name: string; readonly bytes: number; readonly sha256: string }[];
}

const en: PackageStrings = {
  title: 'Your data',
  skipToContent: 'Skip to your data',
  intro:
    'This is the copy of your personal data that you asked for. It lists what the comment service holds about you, explains it in plain words, and tells you what you can do about it. The file data.json holds the same content for other programs, and the folder platform/ holds the files exactly as the comment service exported them.',
  contentsHeading: 'Contents',
  whoHeading: 'Who answers, and when',
  controller: 'Answered by',
  contact: 'Contact',
  requestReceived: 'Your request was received',
  answered: 'This answer was prepared',
  requestReference: 'Reference of your request',
  regulation: { gdpr: 'EU/UK General Data Protection Regulation', ccpa: 'California Consumer Privacy Act' },
  regulationLabel: 'Law your request was made under',
  timeZoneNote: (timeZone) => `All dates and times are shown in the ${timeZone} time zone.`,
  informationHeading: 'How your data is used',
  information: {
    gdpr: {
      purposes: 'Why we process your data (GDPR Art. 15(1)(a))',
      categories: 'Which kinds of data we hold (Art. 15(1)(b))',
      recipients: 'Who receives your data (Art. 15(1)(c))',
      retention: 'How long we keep it (Art. 15(1)(d))',
      rights: 'Your rights (Art. 15(1)(e))',
      complaint: 'Your right to complain (Art. 15(1)(f))',
      source: 'Where the data comes from (Art. 15(1)(g))',
      automatedDecisions: 'Automated decisions and profiling (Art. 15(1)(h))',
      transfers: 'Transfers outside the EU and how they are safeguarded (Art. 15(2))',
    },
    ccpa: {
      categories:
        'The categories of personal information we collected about you (Cal. Civ. Code §1798.110(a)(1))',
      sources: 'The categories of sources we collected it from (§1798.110(a)(2))',
      purposes: 'Why we collect, sell or share it: the business or commercial purpose (§1798.110(a)(3))',
      thirdParties: 'The categories of third parties we disclose it to (§1798.110(a)(4))',
    },
  },
  profileHeading: 'Your profile',
  profile: {
    userName: 'User name',
    displayName: 'Name shown with your comments',
    about: 'About you',
    location: 'Location',
    email: 'E-mail address',
    emailVerified: 'E-mail address confirmed',
    gender: 'Gender',
    birthday: 'Birthday',
    image: 'Profile picture (the service’s reference to it)',
    registered: 'Registered account',
    singleSignOn: 'Signed in through this site’s own account',
    socialAccounts: 'Linked social media accounts',
    privateProfile: 'Profile and comment history hidden from others',
    subscriber: 'Subscriber of this site',
    platformUserId: 'Your number at the comment service',
  },
  yes: 'Yes',
  no: 'No',
  notRecorded: 'Not recorded',
  socialAccounts: (count) => (count === 0 ? 'None' : count === 1 ? 'One account' : `${count} accounts`),
  rolesHeading: 'Your roles',
  rolesIntro: 'A role decides what you may do on the comment service.',
  roleNames: {
    registered: 'Registered member: you can write, reply and vote.',
    owner: 'Owner: full control of the site’s comments and settings.',
    admin: 'Administrator: access to every part of the comment service’s settings.',
    moderator: 'Moderator: you can review, approve and reject comments.',
    'community-moderator': 'Community moderator: you can moderate comments within a conversation.',
    journalist: 'Journalist: you can pick top comments.',
    viewer: 'Viewer: you can see the moderation pages but not change anything.',
    'team-member': 'Team member: you belong to the site’s own team.',
  },
  roleUnknown: (role) => `${role}: a role the comment service uses; it has no further explanation.`,
  roleScopePlatform: 'on the whole comment service',
  roleScopeSite: (site) => `on this site (account ${site})`,
  noRoles: 'No roles are recorded.',
  settingsHeading: 'Your settings',
  settingsIntro: 'These settings decide which notifications the comment service sends you.',
  settingsNone: 'No notification settings are recorded.',
  settingsUnavailable:
    'Your notification settings could not be read from the comment service. Unless you changed them, every notification is sent at once.',
  settingDefault: '(not changed: the default)',
  notificationChannels: { email: 'By e-mail', in_app: 'In the app or page' },
  notificationKinds: {
    liked_your_message: 'Someone liked your comment',
    message_approved: 'Your comment was approved',
    message_rejected: 'Your comment was rejected',
    replied_to_message: 'Someone replied to your comment',
    user_mentioned: 'Someone mentioned you',
  },
  notificationValues: { immediately: 'sent at once', never: 'never sent' },
  commentsHeading: 'Your comments and replies',
  commentsSummary: (comments, conversations) =>
    `${comments} ${comments === 1 ? 'comment' : 'comments and replies'} in ${conversations} ${conversations === 1 ? 'conversation' : 'conversations'}, newest conversation first.`,
  noComments: 'You have written no comments.',
  conversationUntitled: 'Conversation without a title',
  conversationLink: 'Open the page this conversation belongs to',
  conversationId: (id) => `Conversation reference: ${id}`,
  commentKind: { comment: 'Comment', reply: 'Reply' },
  replyToOwn: (date) => `A reply to your comment of ${date}.`,
  replyToOther: 'A reply to someone else’s comment.',
  states: {
    published: 'Published',
    unpublished: 'Not published',
    deleted: 'Deleted',
  },
  edited: 'Edited',
  moderationStatus: (status) => `Moderation: ${status}`,
  ipAddress: (ip) => `Internet address recorded: ${ip}`,
  emptyComment: '(This comment has no text.)',
  detailsUnavailable: {
    not_enabled:
      'Conversation details (titles, links, whether a comment was deleted or edited) were unavailable: the comment service has not enabled them for this site. Your comments are all listed; they are grouped by conversation reference instead of title.',
    refused:
      'Conversation details (titles, links, whether a comment was deleted or edited) were unavailable: the comment service refused the request for them. Your comments are all listed; they are grouped by conversation reference instead of title.',
    unavailable:
      'Conversation details (titles, links, whether a comment was deleted or edited) were unavailable: the comment service did not answer, even after several tries. Your comments are all listed; they are grouped by conversation reference instead of title.',
    invalid_response:
      'Conversation details (titles, links, whether a comment was deleted or edited) were unavailable: the comment service sent an answer that could not be read. Your comments are all listed; they are grouped by conversation reference instead of title.',
    no_user:
      'Conversation details (titles, links, whether a comment was deleted or edited) were unavailable: the comment service’s number for your account was not known. Your comments are all listed; they are grouped by conversation reference instead of title.',
  },
  detailsPartial:
    'Conversation details were fetched for your most recent comments only: there were more than the comment service hands out in one answer. Older conversations are shown by reference instead of title.',
  votesHeading: 'Your likes and dislikes',
  votesIntro:
    'The comment service records which comments you liked or disliked, by the comment’s reference only. Where the comment is one of yours, its conversation is named.',
  likesHeading: (count) => `Likes (${count})`,
  dislikesHeading: (count) => `Dislikes (${count})`,
  noVotes: 'None.',
  voteOnOwn: (title) => `Your own comment in “${title}”`,
  voteOnOther: (id) => `Comment ${id}, written by someone else`,
  glossaryHeading: 'Glossary of the exported fields',
  glossaryIntro:
    'The files in platform/ use the comment service’s own field names. This list explains the ones not already explained above.',
  glossary: {
    id: 'The comment’s reference at the comment service.',
    conversation_id: 'The reference of the page or article the comment belongs to.',
    conv_message_id: 'The conversation reference and the comment reference joined together.',
    parent_comment_id: 'For a reply: the reference of the comment it answers.',
    author_id: 'Your number at the comment service.',
    spot_id: 'The reference of this site at the comment service.',
    written_at: 'When the comment was written, in seconds since 1 January 1970 (UTC).',
    content: 'The text of the comment, in parts.',
    state: 'The moderation state, for example "approved".',
    published: 'Whether the comment is visible to others.',
    edited: 'Whether the comment was changed after it was written.',
    type: 'Whether it is a comment or a reply.',
    stars: 'A rating given with the comment, if the site uses ratings.',
    ip: 'The internet address the comment was sent from.',
    moderator_id: 'The moderator who handled the comment, if any.',
    manually_resolved: 'Whether a moderator decided about the comment by hand.',
    metadata: 'Technical details the service stores with the comment.',
    tags: 'Labels a moderator or the site gave the comment.',
    tags_metadata: 'Technical details about those labels.',
    additional_data: 'Further labels the service stores with the comment.',
    anonymous_user_id: 'Used only for comments written without an account.',
    anonymous_user_name: 'Used only for comments written without an account.',
    anonymous_image_id: 'Used only for comments written without an account.',
    never_hard_delete: 'An internal flag for how the service deletes the comment.',
    token: 'An internal key the service uses to manage the comment; it says nothing about you.',
    social_ids: 'Social media accounts linked to your profile.',
    sso: 'The link between your account on this site and the comment service.',
    roles: 'Your roles, and where each applies ("system" means the whole service).',
    image_id: 'The service’s reference to your profile picture.',
  },
  filesHeading: 'The original files',
  filesIntro:
    'The folder platform/ holds the four files exactly as the comment service exported them. Each file’s SHA-256 fingerprint below lets anyone check that it was not changed.',
  footer:
    'If anything here is wrong or incomplete, contact us at the address above: you can ask us to correct or erase your data.',
  readme: ({ controller, contact, answered, files }) =>
    [
      'YOUR DATA',
      '=========',
      '',
      `This package answers your request for a copy of your personal data. It was prepared by ${controller} on ${answered}.`,
      `Questions: ${contact}`,
      '',
      'What is inside',
      '--------------',
      'index.html   Open this file in any web browser. It explains your data in plain words.',
      '             It works offline, runs no programs and loads nothing from the internet.',
      'data.json    The same content in a structured form, for moving your data to another service.',
      '             Its format is described in the JSON Schema published with svc-dsr',
      '             (docs/subject-package.schema.json).',
      'platform/    The files exactly as the comment service exported them.',
      '',
      'Fingerprints (SHA-256) of the original files',
      '--------------------------------------------',
      ...files.map((file) => `${file.sha256}  ${file.name}  (${file.bytes} bytes)`),
      '',
      'To check a file on Linux or macOS: sha256sum platform/messages.json (or shasum -a 256).',
      'On Windows: certutil -hashfile platform\\messages.json SHA256',
      '',
    ].join('\r\n'),
  sites: {
    intro: (controller) =>
      `This is the copy of your personal data that you asked for, from every site of ${controller} that runs its comments on the same comment service. Each site that holds data about you has its own part below, with its own page, data file and original files.`,
    heldHeading: 'Sites that hold data about you',
    openSite: (site) => `Open your data on ${site}`,
    noneHeading: 'Sites that hold no data about you',
    noneIntro: 'These sites were searched for your account and hold no data about you:',
    noneHeld: 'Every site searched holds data about you.',
    readme: ({ controller, contact, answered, held, none }) =>
      [
        'YOUR DATA',
        '=========',
        '',
        `This package answers your request for a copy of your personal data on every site of ${controller}. It was prepared on ${answered}.`,
        `Questions: ${contact}`,
        '',
        'index.html   Open this file in any web browser: it lists the sites and links to each one.',
        '',
        'Sites that hold data about you, each in its own folder',
        '------------------------------------------------------',
        ...held.map((site) => `${site.folder}  ${site.name}`),
        '',
        'Sites that hold no data about you',
        '---------------------------------',
        ...(none.length === 0 ? ['(none)'] : none),
        '',
        "Each folder holds that site's index.html, data.json, README.txt (with the SHA-256",
        'fingerprints of its original files) and platform/, the files as the comment service exported them.',
        '',
      ].join('\r\n'),
  },
};

/** The catalogs by primary language subtag. */
export const CATALOGS: Readonly<Record<string, PackageStrings>> = { en };

/** The languages with a complete catalog. */
export const PACKAGE_LANGUAGES = Object.keys(CATALOGS);

/**
 * The catalog for a BCP 47 tag ("en", "en-GB"): by its primary subtag, else English. The tag itself
 * still decides how dates are written.
 */
export function stringsFor(language: string): PackageStrings {
  const primary = language.split('-')[0]?.toLowerCase() ?? 'en';
  return CATALOGS[primary] ?? en;
}
