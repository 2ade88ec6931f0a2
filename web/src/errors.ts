// Turns failed API calls into sentences a user can act on.
import { ApiError } from './api';

export type ErrorContext = 'register' | 'signin' | 'load';

export function describeError(error: unknown, context: ErrorContext = 'load'): string {
  if (error instanceof ApiError) return describeApiError(error, context);
  if (error instanceof TypeError) return 'Could not reach the server. Check your connection and try again.';
  return 'Something went wrong. Please try again.';
}

function describeApiError({ status, body }: ApiError, context: ErrorContext): string {
  if (status === 401) return 'You are not signed in. Please sign in with JIA.';
  if (status === 409 && body === 'duplicated: isu') {
    return 'This JIA ISU ID is already registered. An ISU can be registered only once.';
  }
  if (body === 'JIAService returned error') {
    return status === 404
      ? 'JIA refused the activation: it does not know this JIA ISU ID. Check the ID and try again.'
      : `JIA refused the activation (JIA answered ${status}). Check the ID and try again.`;
  }
  if ((status === 400 && body === 'bad format: icon') || status === 413) {
    return 'The icon could not be used. Choose a JPEG or PNG image smaller than 10 MB.';
  }
  if (context === 'signin' && status === 403) {
    return 'Sign-in failed: the sign-in link from JIA was refused or has expired. Please sign in again.';
  }
  if (context === 'signin' && status === 400) {
    return 'Sign-in failed: the sign-in link from JIA does not name a user.';
  }
  if (status === 404) return 'This ISU does not exist, or it is not yours.';
  if (status >= 500) return `The server had a problem (status ${status}). Please try again in a moment.`;
  return `The request failed (status ${status}${body ? `: ${body}` : ''}).`;
}
