import { type Metadata, status } from '@grpc/grpc-js';

/**
 * An RPC failure with its gRPC status code, thrown inside handlers and turned into the
 * call's status by the server. `metadata` carries trailers such as
 * `grpc-status-details-bin`.
 */
export class ApiError extends Error {
  readonly code: status;
  readonly metadata: Metadata | undefined;

  constructor(code: status, message: string, metadata?: Metadata) {
    super(message);
    this.name = 'ApiError';
    this.code = code;
    this.metadata = metadata;
  }
}

export const notFound = (what: string) =>
  new ApiError(status.NOT_FOUND, `Resource not found (resource=${what}).`);
export const alreadyExists = (what: string) =>
  new ApiError(status.ALREADY_EXISTS, `Resource already exists in the project (resource=${what}).`);
export const invalidArgument = (message: string) => new ApiError(status.INVALID_ARGUMENT, message);
export const failedPrecondition = (message: string) => new ApiError(status.FAILED_PRECONDITION, message);
