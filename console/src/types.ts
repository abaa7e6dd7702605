/** The API's answers as the console reads them: the types of the schemas the handlers answer with. */
import type { z } from 'zod';
import type {
  listAnswerSchema,
  listedRequestSchema,
  reportAnswerSchema,
  requestDetailSchema,
  submitAnswerSchema,
  timelineAnswerSchema,
  verifyAnswerSchema,
} from '../../lambdas/api/schemas.ts';

export type ListAnswer = z.infer<typeof listAnswerSchema>;
export type ListedRequest = z.infer<typeof listedRequestSchema>;
export type RequestDetail = z.infer<typeof requestDetailSchema>;
export type TimelineAnswer = z.infer<typeof timelineAnswerSchema>;
export type ReportAnswer = z.infer<typeof reportAnswerSchema>;
export type SubmitAnswer = z.infer<typeof submitAnswerSchema>;
export type VerifyAnswer = z.infer<typeof verifyAnswerSchema>;

/** The statuses of open requests, which the list filters by. */
export const OPEN_STATUSES = ['received', 'running', 'failed'] as const;
export const TYPES = ['access', 'erasure', 'correction'] as const;
export const REGULATIONS = ['gdpr', 'ccpa'] as const;
