// The subject's account settings for the package, read with retrieve-user; a failure leaves them unknown.
import { DsrError, PlatformCapacityError } from '#shared/errors';
import type { PlatformClient } from '#shared/platform-client';
import type { RetrievedUser } from '#shared/platform-schemas';

/** The account settings the export leaves out, as retrieve-user (endpoint 3) answers them. */
export interface AccountSettings {
  /** Per channel, each notification kind given; a kind not given is sent immediately (docs/platform-api.md, "The user"). */
  readonly notifications: { readonly email: Record<string, string>; readonly in_app: Record<string, string> };
  readonly privateProfile: boolean | null;
  readonly subscriber: boolean | null;
}

/** The settings, or why they are missing (the package then says so). */
export type CollectedAccount =
  | { readonly settings: AccountSettings; readonly failure: null }
  | { readonly settings: null; readonly failure: string };

/**
 * Reads the subject's settings with retrieve-user. Like the activity context, it never fails the
 * package: a subject gone from the platform, a refusal or a failure leaves the settings unknown
 * with the reason (an error name, never a message). Only a wait for platform capacity leaves.
 */
export async function collectAccount(
  platform: Pick<PlatformClient, 'retrieveUser'>,
  primaryKey: string,
): Promise<CollectedAccount> {
  let answer: Awaited<ReturnType<typeof platform.retrieveUser>>;
  try {
    answer = await platform.retrieveUser(primaryKey);
  } catch (error) {
    if (error instanceof PlatformCapacityError) throw error;
    return { settings: null, failure: error instanceof DsrError ? error.name : 'Error' };
  }
  if (!answer.found) return { settings: null, failure: 'SubjectNotFound' };
  return { settings: settingsOf(answer.user), failure: null };
}

function settingsOf(user: RetrievedUser): AccountSettings {
  const notifications = user.settings?.notifications;
  return {
    notifications: { email: { ...notifications?.email }, in_app: { ...notifications?.in_app } },
    privateProfile: user.private_profile ?? null,
    subscriber: subscriberOf(user.user_metadata),
  };
}

/** is_subscriber from user_metadata: an object, or (as the register call takes it) base64 of one. */
function subscriberOf(metadata: RetrievedUser['user_metadata']): boolean | null {
  if (metadata === undefined) return null;
  if (typeof metadata !== 'string') return metadata.is_subscriber ?? null;
  try {
    const decoded: unknown = JSON.parse(Buffer.from(metadata, 'base64').toString('utf8'));
    if (typeof decoded === 'object' && decoded !== null && 'is_subscriber' in decoded) {
      return typeof decoded.is_subscriber === 'boolean' ? decoded.is_subscriber : null;
    }
  } catch {
    // Not base64 JSON: the subscriber status is unknown.
  }
  return null;
}
