import { GetCallerIdentityCommand, STSClient } from '@aws-sdk/client-sts';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { auditableOperator, awsOperator, localOperator } from '../../../bin/cli/operator.ts';

describe('the operator an audit record names', () => {
  it('is the caller ARN on AWS, asked once per command', async () => {
    const sts = new STSClient({ region: 'eu-west-1' });
    const mock = mockClient(sts);
    mock.on(GetCallerIdentityCommand).resolves({
      Arn: 'arn:aws:sts::111122223333:assumed-role/PrivacyOperator/jane',
    });
    const operator = awsOperator(sts);

    expect(await operator()).toBe('arn:aws:sts::111122223333:assumed-role/PrivacyOperator/jane');
    expect(await operator()).toBe('arn:aws:sts::111122223333:assumed-role/PrivacyOperator/jane');
    expect(mock.commandCalls(GetCallerIdentityCommand)).toHaveLength(1);
  });

  it('keeps only the local part of an e-mail address in a session name, since audit facts hold none', () => {
    expect(
      auditableOperator(
        'arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_Admin_1a2b/jane.doe@example.com',
      ),
    ).toBe('arn:aws:sts::111122223333:assumed-role/AWSReservedSSO_Admin_1a2b/jane.doe');
  });

  it('is the OS user locally', () => {
    expect(localOperator()).toMatch(/^local-user:\S+$/);
  });
});
