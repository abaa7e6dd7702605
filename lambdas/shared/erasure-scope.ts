/**
 * What an erasure leaves on the platform. Deleting an SSO user (docs/platform-api.md, endpoint 5) deletes the
 * account, its profile and settings; the user's comments remain, linked to a random guest user.
 * "Erased" therefore means the account and what identifies the subject through it, not their words:
 * the erasure's audit record, the completion record, the response notice and `svc-dsr status`
 * say so, and docs/security.md says what to tell the subject.
 */
export const PLATFORM_KEEPS = {
  /** What stays on the platform after the delete. */
  kept: 'comments',
  /** Who the kept comments are linked to. */
  relinked_to: 'random_guest_user',
  /** The same in words, for operators and the response to the subject. */
  text: 'the comments the subject wrote stay on the platform, re-linked to a random guest user; the account, profile and settings are deleted',
} as const;

/** The audit facts of what the platform keeps, for every record that says a subject was erased. */
export function platformKeepsFacts(): { platform_keeps: string; comments_relinked_to: string } {
  return { platform_keeps: PLATFORM_KEEPS.kept, comments_relinked_to: PLATFORM_KEEPS.relinked_to };
}
