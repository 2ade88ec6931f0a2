// Levels, condition flags and times in several zones (daylight-saving days included).
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Condition } from './api';
import {
  addLocalDays,
  describeConditionFlags,
  formatDateTime,
  formatDay,
  formatHour,
  fromDateTimeLocal,
  parseConditionFlags,
  parseIntParam,
  startOfLocalDay,
  summarizeCondition,
  toDateTimeLocal,
} from './format';

// 2021-08-08 00:00:00 JST, the start of JIA's virtual clock.
const VIRTUAL_START = 1628348400;

function useZone(zone: string) {
  let previous: string | undefined;
  beforeEach(() => {
    previous = process.env.TZ;
    process.env.TZ = zone;
  });
  afterEach(() => {
    if (previous === undefined) delete process.env.TZ;
    else process.env.TZ = previous;
  });
}

describe('condition flags and levels', () => {
  it('reads the three flags of the fixed condition form', () => {
    expect(parseConditionFlags('is_dirty=true,is_overweight=false,is_broken=true')).toEqual({
      dirty: true,
      overweight: false,
      broken: true,
    });
    expect(parseConditionFlags('is_dirty=false,is_overweight=false,is_broken=false')).toEqual({
      dirty: false,
      overweight: false,
      broken: false,
    });
  });

  it('refuses other orders, keys and spellings', () => {
    expect(parseConditionFlags('is_overweight=true,is_dirty=false,is_broken=false')).toBeNull();
    expect(parseConditionFlags('is_dirty=True,is_overweight=false,is_broken=false')).toBeNull();
    expect(parseConditionFlags('is_dirty=true,is_overweight=false,is_brokan=false')).toBeNull();
  });

  it('describes problems in words', () => {
    expect(describeConditionFlags('is_dirty=false,is_overweight=false,is_broken=false')).toBe('no problems');
    expect(describeConditionFlags('is_dirty=true,is_overweight=false,is_broken=true')).toBe('dirty, broken');
    expect(describeConditionFlags('is_dirty=true,is_overweight=true,is_broken=true')).toBe(
      'dirty, overweight, broken',
    );
    expect(describeConditionFlags('garbage')).toBe('garbage');
  });

  it('sums a condition up with its level and sitting state', () => {
    const condition: Condition = {
      jia_isu_uuid: 'u',
      isu_name: 'n',
      timestamp: VIRTUAL_START,
      is_sitting: true,
      condition: 'is_dirty=false,is_overweight=true,is_broken=false',
      condition_level: 'warning',
      message: '',
    };
    expect(summarizeCondition(condition)).toBe('Warning: overweight (sitting)');
    expect(summarizeCondition({ ...condition, is_sitting: false, condition_level: 'critical' })).toBe(
      'Critical: overweight (not sitting)',
    );
  });
});

describe('times in the viewer zone', () => {
  it('formats the same instant in the viewer zone', () => {
    expect(formatDateTime(VIRTUAL_START, { locale: 'en-GB', timeZone: 'Asia/Tokyo' })).toBe('8 Aug 2021, 00:00:00');
    expect(formatDateTime(VIRTUAL_START, { locale: 'en-GB', timeZone: 'UTC' })).toBe('7 Aug 2021, 15:00:00');
    expect(formatHour(VIRTUAL_START + 3600 * 14 + 59, { locale: 'en-GB', timeZone: 'Asia/Tokyo' })).toBe('14:00');
    expect(formatDay(VIRTUAL_START, { locale: 'en-GB', timeZone: 'America/New_York' })).toBe('Sat, 7 Aug 2021');
  });

  describe('in Tokyo', () => {
    useZone('Asia/Tokyo');
    it('aligns a timestamp to local midnight', () => {
      expect(startOfLocalDay(VIRTUAL_START + 13 * 3600 + 17)).toBe(VIRTUAL_START);
      expect(startOfLocalDay(VIRTUAL_START - 1)).toBe(VIRTUAL_START - 86400);
      expect(addLocalDays(VIRTUAL_START, 1)).toBe(VIRTUAL_START + 86400);
      expect(addLocalDays(VIRTUAL_START + 5000, -1)).toBe(VIRTUAL_START - 86400);
    });
    it('round-trips datetime-local values', () => {
      expect(toDateTimeLocal(VIRTUAL_START + 3661)).toBe('2021-08-08T01:01:01');
      expect(fromDateTimeLocal('2021-08-08T01:01:01')).toBe(VIRTUAL_START + 3661);
      expect(fromDateTimeLocal('2021-08-08T01:01')).toBe(VIRTUAL_START + 3660);
      expect(fromDateTimeLocal('')).toBeNull();
      expect(fromDateTimeLocal('8/8/2021')).toBeNull();
    });
  });

  describe('in New York, across a daylight-saving change', () => {
    useZone('America/New_York');
    it('gives 23-hour and 25-hour days their real midnights', () => {
      const march13 = Date.UTC(2021, 2, 13, 5) / 1000; // 2021-03-13 00:00 EST
      const march14 = addLocalDays(march13, 1);
      const march15 = addLocalDays(march14, 1);
      expect(march14 - march13).toBe(24 * 3600);
      expect(march15 - march14).toBe(23 * 3600); // clocks jump forward on the 14th
      expect(startOfLocalDay(march14 + 12 * 3600)).toBe(march14);
      const november7 = Date.UTC(2021, 10, 7, 4) / 1000; // 2021-11-07 00:00 EDT
      expect(addLocalDays(november7, 1) - november7).toBe(25 * 3600);
      expect(toDateTimeLocal(november7)).toBe('2021-11-07T00:00:00');
    });
  });

  it('parses integer query parameters strictly', () => {
    expect(parseIntParam('1628348400')).toBe(1628348400);
    expect(parseIntParam('-5')).toBe(-5);
    expect(parseIntParam('12a')).toBeNull();
    expect(parseIntParam('')).toBeNull();
    expect(parseIntParam(null)).toBeNull();
    expect(parseIntParam('99999999999999999999')).toBeNull();
  });
});
