// The `svc-dsr status` command: one request's ledger record, subject identifiers hidden unless asked for.

import { PLATFORM_KEEPS } from '#shared/erasure-scope';
import { isOwed, type LedgerItem, NOTICE_KINDS, noticesDue } from '#shared/ledger';
import { INTAKE_WARNING_TEXT, INTAKE_WARNINGS, type IntakeWarning } from '#shared/request';
import { siteSummary } from '#shared/site-outcomes';
import { siteRequestId } from '#shared/sites';
import {
  type CliIo,
  type CommandResult,
  describeDue,
  parseRequestId,
  processIo,
  terminalText,
  writeJson,
} from '../format.ts';
import { EXIT } from '../io.ts';
import { withLedger } from '../ledger-context.ts';
import type { CliContext } from '../target.ts';
import { type TargetFlags, targetArgs } from '../target-flags.ts';
import { loadRequest } from './common.ts';

/** Options of `svc-dsr status`. */
export interface StatusOptions {
  readonly requestId: string;
  readonly json?: boolean;
  /** Include primary_key and svc_user_id (hidden by default). */
  readonly showSubject?: boolean;
  /** The target flags as typed (see targetArgs), appended to the commands a hint suggests. */
  readonly targetArgs?: string;
}

/** A ledger item as status shows it: the subject's identifiers only when asked for. */
export type RequestView = Omit<LedgerItem, 'primary_key' | 'svc_user_id'> & {
  primary_key?: string;
  svc_user_id?: string;
  /** For an erased subject: what the platform keeps (their comments, re-linked to a random guest user). */
  platform_keeps?: string;
};

/** The ledger item without the subject's identifiers unless `showSubject`. */
export function viewOf(item: LedgerItem, showSubject: boolean): RequestView {
  const keeps = item.outcome === 'erased' ? { platform_keeps: PLATFORM_KEEPS.text } : {};
  // A correction's values are never shown: its field names are (correction_fields).
  const { correction_values: _values, ...shown } = item;
  if (showSubject) return { ...shown, ...keeps };
  const { primary_key: _primaryKey, svc_user_id: _svcUserId, ...rest } = shown;
  return { ...rest, ...keeps };
}

/** Prints one request's ledger item. An unknown id is exit 1. */
export async function runStatus(
  context: Pick<CliContext, 'ledger' | 'target' | 'clock'>,
  options: StatusOptions,
  io: CliIo,
): Promise<CommandResult<RequestView>> {
  const requestId = parseRequestId(options.requestId);
  const item = await loadRequest(context, requestId);
  const view = viewOf(item, options.showSubject === true);
  // The notices given are the item's notice_* fields; the ones still owed are worked out here.
  if (options.json === true) writeJson(io, { ...view, notices_due: noticesDue(item, context.clock()) });
  else io.out(describeRequest(item, options.showSubject === true, context.clock(), options.targetArgs ?? ''));
  return { exitCode: EXIT.ok, result: view };
}

/** The human-readable page of one request. */
export function describeRequest(item: LedgerItem, showSubject: boolean, now: Date, targetArgs = ''): string {
  const rows: [string, string][] = [];
  const add = (label: string, value: string | undefined) => {
    if (value !== undefined && value !== '') rows.push([label, terminalText(value)]);
  };
  add('request', item.request_id);
  add(
    'status',
    [item.status, item.step ? `(step ${item.step})` : '', item.outcome ? `outcome ${item.outcome}` : '']
      .filter(Boolean)
      .join(' '),
  );
  add('type', [item.type, item.regulation].filter(Boolean).join(', '));
  // A request in parts: what each site came to, by its results; a part names its request.
  if (item.site_results !== undefined) {
    add('sites', siteSummary(item.sites ?? [], item.site_results));
    for (const site of item.sites ?? [])
      add(`  ${site}`, `npx svc-dsr status ${siteRequestId(item.request_id, site)}${targetArgs}`);
  }
  if (item.parent_request_id !== undefined) {
    add(
      'part of',
      `request ${item.parent_request_id}, on site ${item.site ?? ''} (act on the request as a whole)`,
    );
  }
  add('reference', item.reference);
  add('channel', item.channel);
  add('submitted by', item.submitted_by);
  add('received', item.received_at);
  if (item.verification) {
    const { method, verified_by: by, verified_at: at } = item.verification;
    add('verified', `${method} by ${by} at ${at}`);
  }
  if (item.due_at) {
    const open = isOwed(item.status);
    add('due', `${item.due_at}${open ? ` (${describeDue(item.due_at, now)})` : ''}`);
  }
  // Received after its deadline had already passed: a mistyped received_at, or a request found late.
  add(
    'overdue',
    item.overdue_at_intake === true ? 'at intake: its deadline had passed when it was received' : undefined,
  );
  for (const warning of item.intake_warnings ?? []) add('warning', intakeWarningText(warning));
  add('extended', item.extended ? `yes: ${item.extension_reason ?? 'no reason recorded'}` : undefined);
  add('may extend to', item.extended ? undefined : item.extension_limit_at);
  add('confirm by', item.confirm_by ?? undefined);
  if (item.export_id !== undefined || item.export_attempts > 0) {
    add(
      'export',
      [
        item.export_id ? `id ${item.export_id}` : '',
        `attempt ${item.export_attempts}`,
        exportStatusText(item),
        `${item.export_polls} poll${item.export_polls === 1 ? '' : 's'}`,
        `waited ${item.export_waited_seconds} s`,
        item.export_started_at ? `started ${item.export_started_at}` : '',
      ]
        .filter(Boolean)
        .join(', '),
    );
  }
  if (item.archive) {
    const archive = item.archive;
    add(
      'archive',
      `${archive.key}, ${archive.bytes} bytes, ${archive.entries} entries, verified ${archive.verified_at}`,
    );
    add('sha256', archive.sha256);
  }
  if (item.subject_package) {
    const built = item.subject_package;
    const details =
      built.conversation_details === 'unavailable'
        ? `conversation details unavailable (${built.conversation_details_reason ?? 'unknown'})`
        : `conversation details ${built.conversation_details}`;
    add('subject package', `${built.file_name}, ${built.bytes} bytes, built ${built.built_at}; ${details}`);
    add('package sha256', built.sha256);
  }
  if (item.erasure) {
    add(
      'erasure',
      `${item.erasure.outcome} (platform answered ${item.erasure.platform_status}) at ${item.erasure.at}`,
    );
  }
  if (item.erasure_verification) {
    add(
      'erasure check',
      `platform answers ${item.erasure_verification.platform_answer} at ${item.erasure_verification.at}`,
    );
  }
  if (item.outcome === 'erased') add('platform keeps', PLATFORM_KEEPS.text);
  if (item.correction_fields !== undefined) add('corrects', item.correction_fields.join(', '));
  if (item.correction) {
    const altered =
      item.correction.altered.length === 0
        ? ''
        : `; the platform altered ${item.correction.altered.join(', ')}`;
    add(
      'correction',
      `${item.correction.outcome} at ${item.correction.at}, ${item.correction.attempts} attempt(s)${altered}`,
    );
    if (item.correction.email_sent_unverified === true) {
      add(
        'new e-mail',
        'sent to the platform as unverified (email_verified false): the subject has not yet proved control of the new address',
      );
    }
  }
  if (item.minimised_at !== undefined) {
    add('minimised', `${item.minimised_at}: who it names is kept only as keyed hashes (retention passed)`);
  }
  if (item.error) add('error', `${item.error.code}: ${item.error.message}`);
  if (item.rejection_errors) add('rejected', item.rejection_errors.join('; '));
  add('cancel reason', item.cancel_reason);
  if (item.denial) {
    add(
      'denied',
      `${item.denial.code}${item.denial.reason ? `: ${item.denial.reason}` : ''} at ${item.denial.at}`,
    );
  }
  for (const kind of NOTICE_KINDS) {
    const given = item[`notice_${kind}`];
    if (given !== undefined) {
      add(
        `${kind} notice`,
        `given ${given.at} by ${given.channel}${given.reference ? ` (${given.reference})` : ''}` +
          // A notice counts as given when recorded if that is later (report, on_time).
          (Date.parse(given.recorded_at) - Date.parse(given.at) > 5 * 60_000
            ? `, recorded ${given.recorded_at}`
            : '') +
          (given.template === undefined ? '' : `, template ${given.template}`),
      );
    }
  }
  for (const due of noticesDue(item, now)) {
    add(
      `${due.kind} notice`,
      `DUE${due.due_by === null ? '' : ` by ${due.due_by}`}${due.overdue ? ' (overdue)' : ''}: record it with npx svc-dsr notice ${item.request_id} --kind ${due.kind} --channel email${targetArgs}`,
    );
  }
  if (item.status === 'failed') {
    // What a person does next with a failed request, as a command that works when pasted.
    add('next', `retry it: npx svc-dsr retry ${item.request_id}${targetArgs} (add --reason to say why)`);
  }
  add(
    'counters',
    `executions ${item.executions}, duplicates ${item.duplicates}, conflicts ${item.conflicts}`,
  );
  add('created', item.created_at);
  add('updated', item.updated_at);
  add('completed', item.completed_at);
  if (showSubject) {
    add('primary_key', item.primary_key);
    add('svc_user_id', item.svc_user_id);
  } else if (item.primary_key !== undefined) {
    add('subject', 'hidden (pass --show-subject to see primary_key and svc_user_id)');
  }
  const width = Math.max(...rows.map(([label]) => label.length));
  return `${rows.map(([label, value]) => `${label.padEnd(width)}  ${value}`).join('\n')}\n`;
}

export interface StatusFlags extends TargetFlags {
  readonly json?: boolean;
  readonly showSubject?: boolean;
}

/** `svc-dsr status` run with its parsed arguments and flags (registered in ../register/status.ts). */
export async function statusAction(requestId: string, flags: StatusFlags): Promise<void> {
  const options = {
    requestId: parseRequestId(requestId),
    json: flags.json === true,
    showSubject: flags.showSubject === true,
    targetArgs: targetArgs(flags),
  };
  const { exitCode } = await withLedger(flags, (context) => runStatus(context, options, processIo));
  process.exitCode = exitCode;
}

/** An intake warning's code and what it means; a code this CLI does not know is shown as it is. */
function intakeWarningText(code: string): string {
  const known = INTAKE_WARNINGS.find((warning): warning is IntakeWarning => warning === code);
  return known === undefined ? code : `${known}: ${INTAKE_WARNING_TEXT[known]}`;
}

/**
 * The export's status as the ledger holds it, except after a start that got no answer: the ledger
 * marks that attempt `failed` so the next one starts anew, but no export is known to have failed.
 */
function exportStatusText(item: LedgerItem): string {
  if (item.export_status === undefined) return '';
  if (item.export_status === 'failed' && item.export_start === 'uncertain')
    return 'start unconfirmed (the platform gave no clear answer)';
  if (item.export_status === 'failed' && item.export_start === 'interrupted')
    return 'start unconfirmed (interrupted before the platform answered)';
  return `status ${item.export_status}`;
}
