/** Why a template build failed, in words a user can act on; `code` is stable for clients. */
export type BuildFailure =
  | 'ImageNotFound'
  | 'AuthRefused'
  | 'RegistryRefused'
  | 'RegistryUnreachable'
  | 'RegistryError'
  | 'DigestMismatch'
  | 'UnsupportedImage'
  | 'LayerRefused'
  | 'TooLarge'
  | 'StorageQuotaExceeded'
  | 'Canceled'
  | 'BuildFailed'
  // A Dockerfile's
  | 'StepFailed'
  | 'BadDockerfile'
  | 'BaseNotReady'
  | 'BadContext'
  | 'ContextMissing'
  | 'ContextUnreachable';

export class TemplateBuildError extends Error {
  constructor(
    readonly code: BuildFailure,
    message: string,
  ) {
    super(message);
    this.name = 'TemplateBuildError';
  }
}
