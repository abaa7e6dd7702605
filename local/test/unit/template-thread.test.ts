import { describe, expect, it } from 'vitest';
import { synthesizeTemplateOnThread } from '#local/threads/template-thread';
import { synthesizeTemplate } from '../../../lib/template.ts';

describe('synthesizeTemplateOnThread', () => {
  it('answers the template that synthesizing in this thread gives', async () => {
    // Act
    const onThread = await synthesizeTemplateOnThread();
    // Assess
    expect(onThread).toEqual(synthesizeTemplate());
    expect(JSON.stringify(onThread)).toContain('AWS::StepFunctions::StateMachine');
  });

  it("rejects with the synthesis error's name and message when the stack cannot be built", async () => {
    await expect(synthesizeTemplateOnThread({ pollInitialSeconds: 'soon' })).rejects.toThrow(
      /^the stack could not be synthesized \(StackConfigError\): .*pollInitialSeconds/,
    );
  });
});
