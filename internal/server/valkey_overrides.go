package server

import (
	"context"

	"github.com/sluicehq/sluice"
)

// ValkeyStore keeps key overrides through the valkeystore.Store it
// connected (sluice.OverrideStore); before it connects, every call fails
// with ErrNotConnected (or the authentication refusal that keeps it from connecting).

// PutOverride implements sluice.OverrideStore.
func (s *ValkeyStore) PutOverride(ctx context.Context, index, key string, rec sluice.OverrideRecord) error {
	st := s.store.Load()
	if st == nil {
		return s.notConnected()
	}
	return st.PutOverride(ctx, index, key, rec)
}

// GetOverride implements sluice.OverrideStore.
func (s *ValkeyStore) GetOverride(ctx context.Context, key string) (sluice.OverrideRecord, bool, error) {
	st := s.store.Load()
	if st == nil {
		return sluice.OverrideRecord{}, false, s.notConnected()
	}
	return st.GetOverride(ctx, key)
}

// DeleteOverride implements sluice.OverrideStore.
func (s *ValkeyStore) DeleteOverride(ctx context.Context, index, key, identity string) error {
	st := s.store.Load()
	if st == nil {
		return s.notConnected()
	}
	return st.DeleteOverride(ctx, index, key, identity)
}

// ListOverrides implements sluice.OverrideStore.
func (s *ValkeyStore) ListOverrides(ctx context.Context, index string, keyOf func(string) string) ([]sluice.OverrideRecord, error) {
	st := s.store.Load()
	if st == nil {
		return nil, s.notConnected()
	}
	return st.ListOverrides(ctx, index, keyOf)
}

var _ sluice.OverrideStore = (*ValkeyStore)(nil)
