import type { Template } from 'aws-cdk-lib/assertions';
import type { StackConfigInput } from '../../lib/config.ts';

/** A complete configuration, as a platform engineer would write it in cdk.json. */
export const productionConfig = {
  spotId: 'sp_Live42',
  platformBaseUrl: 'https://api.comments.example.com/api',
  platformExportUrl: 'https://export.comments.example.com',
  platformActivityUrl: 'https://activity.comments.example.com',
  downloadAllowedHosts: ['downloads.comments.example.com', '*.cdn.example.net'],
  alarmEmail: 'privacy-oncall@example.com',
} as const satisfies StackConfigInput;

/** A loosely typed piece of a synthesized template, as `Template.toJSON()` returns it. */
export type CfnObject = ReturnType<Template['toJSON']>;
