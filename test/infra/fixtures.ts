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
  controllerName: 'Example News Ltd',
  controllerContact: 'privacy@example.com, 1 Fleet Street, London',
  accessNotice: {
    gdpr: {
      purposes: 'To publish your comments and run the discussion under our articles.',
      categories:
        'Your profile, your comments and replies, your votes and the internet address of each comment.',
      recipients: 'Our comment platform provider, who processes the data for us.',
      retention: 'While your account exists, and 30 days after you delete it.',
      rights: 'You may ask us to correct, erase or restrict your data, or object to how we use it.',
      complaint: 'You may complain to the Information Commissioner’s Office (ico.org.uk).',
      source: 'You gave us this data when you registered and commented.',
      automatedDecisions: 'We make no automated decisions about you and do not profile you.',
      transfers:
        'Our comment platform provider stores the data in the United States, under the EU standard contractual clauses (Art. 46(2)(c)); ask us for a copy.',
    },
    ccpa: {
      categories:
        'Identifiers (user name, e-mail address, internet address) and internet activity (your comments, replies and votes).',
      sources: 'You, when you registered and commented; our comment platform provider.',
      purposes:
        'To publish your comments and run the discussion under our articles. We do not sell or share it.',
      thirdParties: 'Our comment platform provider, as our service provider.',
    },
  },
} as const satisfies StackConfigInput;

/** A loosely typed piece of a synthesized template, as `Template.toJSON()` returns it. */
export type CfnObject = ReturnType<Template['toJSON']>;
