// /register: JIA ISU ID, name and optional icon; errors in words.
import type { ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api';
import { ErrorMessage } from '../components/Status';
import { useTitle } from '../hooks';
import { navigate, paths } from '../router';
import { validateRegistration } from '../validate';

type Problems = ReturnType<typeof validateRegistration>;

export function RegisterPage() {
  useTitle('Register an ISU');
  const [uuid, setUuid] = useState('');
  const [name, setName] = useState('');
  const [icon, setIcon] = useState<File | null>(null);
  const [preview, setPreview] = useState<string | null>(null);
  const [problems, setProblems] = useState<Problems>({});
  const [failure, setFailure] = useState<unknown>(null);
  const [sending, setSending] = useState(false);

  useEffect(() => {
    if (!icon || !icon.type.startsWith('image/')) return setPreview(null);
    const url = URL.createObjectURL(icon);
    setPreview(url);
    return () => URL.revokeObjectURL(url);
  }, [icon]);

  const onSubmit = async (event: Event) => {
    event.preventDefault();
    const found = validateRegistration({ uuid, name, icon });
    setProblems(found);
    setFailure(null);
    if (Object.keys(found).length > 0) return;
    setSending(true);
    try {
      const isu = await api.registerIsu(uuid.trim(), name.trim(), icon);
      navigate(paths.isu(isu.jia_isu_uuid));
    } catch (error) {
      setFailure(error);
    } finally {
      setSending(false);
    }
  };

  return (
    <section class="narrow" aria-labelledby="register-title">
      <h1 id="register-title">Register an ISU</h1>
      <p class="hint">JIA activates the ISU and it starts reporting its condition within seconds.</p>
      <form class="form" onSubmit={onSubmit} noValidate>
        <Field id="uuid" label="JIA ISU ID" problem={problems.uuid}>
          <input
            id="uuid"
            name="jia_isu_uuid"
            value={uuid}
            onInput={(e) => setUuid(e.currentTarget.value)}
            placeholder="0694e4d7-dfce-4aec-b7ca-887ac42cfb8f"
            autocomplete="off"
            spellcheck={false}
            required
            aria-invalid={problems.uuid ? true : undefined}
            aria-describedby={problems.uuid ? 'uuid-problem' : undefined}
          />
        </Field>
        <Field id="name" label="Name" problem={problems.name}>
          <input
            id="name"
            name="isu_name"
            value={name}
            onInput={(e) => setName(e.currentTarget.value)}
            required
            aria-invalid={problems.name ? true : undefined}
            aria-describedby={problems.name ? 'name-problem' : undefined}
          />
        </Field>
        <Field id="icon" label="Icon (optional)" problem={problems.icon}>
          <input
            id="icon"
            name="image"
            type="file"
            accept="image/*"
            onChange={(e) => setIcon(e.currentTarget.files?.[0] ?? null)}
            aria-invalid={problems.icon ? true : undefined}
            aria-describedby={problems.icon ? 'icon-problem' : 'icon-hint'}
          />
          <span id="icon-hint" class="hint">
            Without an icon, ISUCONDITION shows a default picture.
          </span>
          {preview && <img class="isu-icon" src={preview} alt="Icon preview" width={64} height={64} />}
        </Field>
        {failure !== null && <ErrorMessage error={failure} context="register" />}
        <button class="button button-primary" type="submit" disabled={sending}>
          {sending ? 'Registering…' : 'Register'}
        </button>
      </form>
    </section>
  );
}

function Field(props: { id: string; label: string; problem: string | undefined; children: ComponentChildren }) {
  return (
    <div class="field">
      <label for={props.id}>{props.label}</label>
      {props.children}
      {props.problem && (
        <span id={`${props.id}-problem`} class="field-problem" role="alert">
          {props.problem}
        </span>
      )}
    </div>
  );
}
