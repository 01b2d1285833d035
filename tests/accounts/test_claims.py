"""Teams from claims: IT's mappings turn the provider's groups claim into memberships and IT staff."""

from __future__ import annotations

from portal.accounts import claims
from portal.accounts.models import ClaimMapping, Membership, ResourceGroup


def teams(user):
    return sorted((m.group.slug, m.role) for m in Membership.objects.filter(user=user))


def test_each_mapped_value_gives_its_team_and_role(alice):
    Membership.objects.filter(user=alice).delete()
    claims.apply_groups(alice, ["vision", "fraud", "unmapped-value"])
    assert teams(alice) == [("fraud", "member"), ("vision", "member")]


def test_the_highest_role_wins_when_several_values_map_to_one_team(alice):
    claims.apply_groups(alice, ["vision", "vision-leads"])
    assert teams(alice) == [("vision", "lead")]
    claims.apply_groups(alice, ["vision"])
    assert teams(alice) == [("vision", "member")]


def test_a_membership_the_claims_no_longer_give_is_removed(bob):
    claims.apply_groups(bob, ["fraud"])
    assert teams(bob) == [("fraud", "member")]


def test_teams_without_any_mapping_are_managed_by_hand_and_left_alone(alice):
    research = ResourceGroup.objects.create(slug="research", name="Research")
    Membership.objects.create(user=alice, group=research, role="lead")
    claims.apply_groups(alice, [])
    assert teams(alice) == [("research", "lead")]


def test_it_staff_follows_the_claims_once_a_mapping_grants_it(alice, it_admin):
    claims.apply_groups(alice, ["vision", "it-admins"])
    alice.refresh_from_db()
    assert (alice.is_staff, alice.is_superuser) == (True, True)
    claims.apply_groups(it_admin, [])
    it_admin.refresh_from_db()
    assert (it_admin.is_staff, it_admin.is_superuser) == (False, False)


def test_without_an_it_mapping_staff_flags_stay_as_set_by_hand(it_admin):
    ClaimMapping.objects.filter(makes_it_staff=True).delete()
    claims.apply_groups(it_admin, [])
    it_admin.refresh_from_db()
    assert it_admin.is_staff
