-- The thread's keys, in the order every script receives them.
local M, C, I, S, X, W, WX, P, SY, OD, OS, IX, E =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13]
