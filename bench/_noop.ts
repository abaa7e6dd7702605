import { S3Client } from '@aws-sdk/client-s3';
import { z } from 'zod';
import { copyExportToS3 } from '#shared/archive';

console.log(typeof S3Client, typeof z, typeof copyExportToS3, process.resourceUsage().maxRSS / 1024);
