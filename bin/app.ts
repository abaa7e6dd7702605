import { App } from 'aws-cdk-lib';
import { DsrStack } from '../lib/dsr-stack.ts';

const app = new App();
new DsrStack(app, 'SvcDsr', {
  description: 'svc-dsr: GDPR and CCPA data-subject requests for the svc comment platform',
});
