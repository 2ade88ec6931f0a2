// Checks of the registration form that can be made before asking the server.

export const MAX_ICON_BYTES = 10 * 1024 * 1024;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface RegisterInput {
  uuid: string;
  name: string;
  icon: { type: string; size: number } | null;
}

/** Problems with the form, one sentence per field; empty when it can be sent. */
export function validateRegistration(input: RegisterInput): Partial<Record<'uuid' | 'name' | 'icon', string>> {
  const problems: Partial<Record<'uuid' | 'name' | 'icon', string>> = {};
  const uuid = input.uuid.trim();
  if (!uuid) problems.uuid = 'Enter the JIA ISU ID printed on your ISU.';
  else if (!UUID.test(uuid)) problems.uuid = 'A JIA ISU ID looks like 0694e4d7-dfce-4aec-b7ca-887ac42cfb8f.';
  if (!input.name.trim()) problems.name = 'Give your ISU a name.';
  if (input.icon) {
    if (!input.icon.type.startsWith('image/')) problems.icon = 'The icon must be an image (JPEG or PNG).';
    else if (input.icon.size > MAX_ICON_BYTES) problems.icon = 'The icon must be smaller than 10 MB.';
    else if (input.icon.size === 0) problems.icon = 'The icon file is empty.';
  }
  return problems;
}
