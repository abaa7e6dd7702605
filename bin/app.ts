import { App, Aspects } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { DsrStack } from '../lib/dsr-stack.ts';

const app = new App();
new DsrStack(app, 'SvcDsr', {
  description: 'svc-dsr: GDPR and CCPA data-subject requests for the svc comment platform',
});
// Every finding is either fixed or acknowledged on its own resource with a reason; an
// unacknowledged one fails synth.
Aspects.of(app).add(new AwsSolutionsChecks({ reports: false }));
