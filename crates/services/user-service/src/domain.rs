//! The user: the domain types and their wire forms (JSON and `user.v1`).
//!
//! A registration is parsed once, at the edge, into a [`NewUser`] whose
//! fields are known good; a bad field becomes a [`ParseError`] naming it.

use chrono::{DateTime, NaiveDate, Utc};
use model::ParseError;
use proto::user::v1 as pb;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// Gender as the Go post's form recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Gender {
    Female,
    Male,
    Other,
}

impl Gender {
    /// The name in JSON and in the data set.
    pub fn as_str(self) -> &'static str {
        match self {
            Gender::Female => "FEMALE",
            Gender::Male => "MALE",
            Gender::Other => "OTHER",
        }
    }

    /// The number stored in Postgres: the `user.v1.Gender` enum value.
    pub fn as_i16(self) -> i16 {
        match self {
            Gender::Female => 1,
            Gender::Male => 2,
            Gender::Other => 3,
        }
    }

    /// The gender with that number.
    pub fn from_i32(n: i32) -> Result<Self, ParseError> {
        match n {
            1 => Ok(Gender::Female),
            2 => Ok(Gender::Male),
            3 => Ok(Gender::Other),
            _ => Err(ParseError::new("gender", "must be FEMALE, MALE or OTHER")),
        }
    }
}

impl std::str::FromStr for Gender {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "FEMALE" => Ok(Gender::Female),
            "MALE" => Ok(Gender::Male),
            "OTHER" => Ok(Gender::Other),
            _ => Err(ParseError::new(
                "gender",
                format!("{} is not one of FEMALE, MALE, OTHER", model::quoted(s)),
            )),
        }
    }
}

/// A registered user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: Uuid,
    pub username: String,
    pub first_name: String,
    pub last_name: String,
    pub email: String,
    pub phone: String,
    pub gender: Gender,
    pub birth_date: NaiveDate,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A registration whose every field has been checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    pub username: String,
    pub first_name: String,
    pub last_name: String,
    pub email: String,
    pub phone: String,
    pub gender: Gender,
    pub birth_date: NaiveDate,
}

impl NewUser {
    /// Checks the raw fields of a registration form.
    #[allow(clippy::too_many_arguments)]
    pub fn parse(
        username: String,
        first_name: String,
        last_name: String,
        email: String,
        phone: String,
        gender: Gender,
        birth_date: &str,
    ) -> Result<Self, ParseError> {
        let username = username.trim().to_owned();
        let len = username.chars().count();
        if !(3..=64).contains(&len) {
            return Err(ParseError::new("username", "must be 3 to 64 characters"));
        }
        if !username
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
        {
            return Err(ParseError::new(
                "username",
                "may hold only lower-case letters, digits, '.', '_' and '-'",
            ));
        }
        let text = |field: &str, v: String, max: usize| -> Result<String, ParseError> {
            let v = v.trim().to_owned();
            if v.is_empty() {
                return Err(ParseError::new(field, "is required"));
            }
            if v.chars().count() > max {
                return Err(ParseError::new(
                    field,
                    format!("is longer than {max} characters"),
                ));
            }
            if v.chars().any(char::is_control) {
                return Err(ParseError::new(field, "contains a control character"));
            }
            Ok(v)
        };
        let first_name = text("first_name", first_name, 100)?;
        let last_name = text("last_name", last_name, 100)?;
        let email = text("email", email, 254)?;
        match email.split_once('@') {
            Some((local, domain))
                if !local.is_empty() && domain.contains('.') && !domain.contains('@') => {}
            _ => {
                return Err(ParseError::new(
                    "email",
                    format!("{email:?} is not an email address"),
                ));
            }
        }
        let phone = text("phone", phone, 32)?;
        if !phone
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | ' ' | '(' | ')'))
        {
            return Err(ParseError::new(
                "phone",
                "may hold only digits, spaces and + - ( )",
            ));
        }
        let birth_date = NaiveDate::parse_from_str(birth_date, "%Y-%m-%d").map_err(|_| {
            ParseError::new(
                "birth_date",
                format!(
                    "{} is not a date like 1990-04-21",
                    model::quoted(birth_date)
                ),
            )
        })?;
        let earliest = NaiveDate::from_ymd_opt(1900, 1, 1).unwrap_or(NaiveDate::MIN);
        if birth_date < earliest || birth_date > Utc::now().date_naive() {
            return Err(ParseError::new(
                "birth_date",
                "must be between 1900-01-01 and today",
            ));
        }
        Ok(NewUser {
            username,
            first_name,
            last_name,
            email,
            phone,
            gender,
            birth_date,
        })
    }

    /// The user this registration creates.
    pub fn into_user(self, id: Uuid, now: DateTime<Utc>) -> User {
        User {
            id,
            username: self.username,
            first_name: self.first_name,
            last_name: self.last_name,
            email: self.email,
            phone: self.phone,
            gender: self.gender,
            birth_date: self.birth_date,
            created_at: now,
            updated_at: now,
        }
    }
}

/// The data set's user as a domain user (they never change after creation).
pub fn from_dataset(u: &dataset::DatasetUser) -> User {
    User {
        id: u.id,
        username: u.username.clone(),
        first_name: u.first_name.clone(),
        last_name: u.last_name.clone(),
        email: u.email.clone(),
        phone: u.phone.clone(),
        gender: u.gender.parse().unwrap_or(Gender::Other),
        birth_date: u.birth_date,
        created_at: u.created_at,
        updated_at: u.created_at,
    }
}

/// A user in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserJson {
    pub id: Uuid,
    #[schema(example = "minji.kim.a1")]
    pub username: String,
    pub first_name: String,
    pub last_name: String,
    pub email: String,
    pub phone: String,
    pub gender: Gender,
    /// ISO 8601 date.
    #[schema(value_type = String, example = "1990-04-21")]
    pub birth_date: NaiveDate,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<&User> for UserJson {
    fn from(u: &User) -> Self {
        UserJson {
            id: u.id,
            username: u.username.clone(),
            first_name: u.first_name.clone(),
            last_name: u.last_name.clone(),
            email: u.email.clone(),
            phone: u.phone.clone(),
            gender: u.gender,
            birth_date: u.birth_date,
            created_at: u.created_at,
            updated_at: u.updated_at,
        }
    }
}

/// The body of `GET /v1/users/{id}` and of a registration's answer: the
/// JSON form of `GetUserResponse` / `RegisterUserResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserEnvelopeJson {
    pub user: UserJson,
}

/// The body of `GET /v1/users/{id}/orders`. The transport and the upstream
/// time travel as the `x-via` and `x-upstream-micros` headers, not here, so
/// that the body is byte-for-byte the same whichever transport fetched it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserWithOrdersJson {
    pub user: UserJson,
    pub orders: Vec<model::json::OrderJson>,
}

/// The body of `GET /v1/orders`: each user's orders, in the order the users
/// were named. Like [`UserWithOrdersJson`], the same bytes whichever
/// transport fetched them and however they were fetched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrdersOfUsersJson {
    pub lookups: Vec<UserOrdersJson>,
}

/// One user's orders within [`OrdersOfUsersJson`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserOrdersJson {
    pub user_id: Uuid,
    pub orders: Vec<model::json::OrderJson>,
}

/// A registration form in JSON (the Go post's `User`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterUserJson {
    /// 3 to 64 lower-case letters, digits, '.', '_' or '-'.
    #[schema(example = "minji.kim.a1", pattern = "^[a-z0-9._-]{3,64}$")]
    pub username: String,
    #[schema(min_length = 1, max_length = 100)]
    pub first_name: String,
    #[schema(min_length = 1, max_length = 100)]
    pub last_name: String,
    #[schema(format = Email, max_length = 254, example = "minji@example.com")]
    pub email: String,
    /// Digits, spaces and + - ( ).
    #[schema(pattern = "^[0-9+() -]{1,32}$", example = "+82 10-1234-5678")]
    pub phone: String,
    /// FEMALE, MALE or OTHER.
    #[schema(example = "FEMALE", pattern = "^(FEMALE|MALE|OTHER)$")]
    pub gender: String,
    /// YYYY-MM-DD.
    #[schema(example = "1990-04-21", format = Date)]
    pub birth_date: String,
}

impl TryFrom<RegisterUserJson> for NewUser {
    type Error = ParseError;
    fn try_from(j: RegisterUserJson) -> Result<Self, Self::Error> {
        let gender = j.gender.parse()?;
        NewUser::parse(
            j.username,
            j.first_name,
            j.last_name,
            j.email,
            j.phone,
            gender,
            &j.birth_date,
        )
    }
}

impl TryFrom<pb::RegisterUserRequest> for NewUser {
    type Error = ParseError;
    fn try_from(r: pb::RegisterUserRequest) -> Result<Self, Self::Error> {
        let gender = Gender::from_i32(r.gender)?;
        NewUser::parse(
            r.username,
            r.first_name,
            r.last_name,
            r.email,
            r.phone,
            gender,
            &r.birth_date,
        )
    }
}

/// A user in protobuf.
pub fn user_to_pb(u: &User) -> pb::User {
    pb::User {
        id: u.id.to_string(),
        username: u.username.clone(),
        first_name: u.first_name.clone(),
        last_name: u.last_name.clone(),
        email: u.email.clone(),
        phone: u.phone.clone(),
        gender: match u.gender {
            Gender::Female => pb::Gender::Female,
            Gender::Male => pb::Gender::Male,
            Gender::Other => pb::Gender::Other,
        } as i32,
        birth_date: u.birth_date.format("%Y-%m-%d").to_string(),
        created_at: Some(model::v2::timestamp(u.created_at)),
        updated_at: Some(model::v2::timestamp(u.updated_at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form() -> RegisterUserJson {
        RegisterUserJson {
            username: "hana.park".into(),
            first_name: "Hana".into(),
            last_name: "Park".into(),
            email: "hana@example.com".into(),
            phone: "+82-10-1234-5678".into(),
            gender: "FEMALE".into(),
            birth_date: "1991-02-03".into(),
        }
    }

    #[test]
    fn a_good_form_becomes_a_new_user() {
        let n = NewUser::try_from(form()).unwrap();
        assert_eq!(n.gender, Gender::Female);
        assert_eq!(n.birth_date, NaiveDate::from_ymd_opt(1991, 2, 3).unwrap());
    }

    #[test]
    fn each_bad_field_is_named() {
        type Spoil = fn(&mut RegisterUserJson);
        let cases: [(&str, Spoil); 6] = [
            ("username", |f| f.username = "Bad Name".into()),
            ("first_name", |f| f.first_name = "  ".into()),
            ("email", |f| f.email = "nope".into()),
            ("phone", |f| f.phone = "call me".into()),
            ("gender", |f| f.gender = "female".into()),
            ("birth_date", |f| f.birth_date = "03/02/1991".into()),
        ];
        for (field, spoil) in cases {
            let mut f = form();
            spoil(&mut f);
            assert_eq!(NewUser::try_from(f).unwrap_err().field, field);
        }
    }

    #[test]
    fn data_set_users_are_valid_registrations() {
        for d in dataset::users().iter().take(50) {
            let u = from_dataset(d);
            let again = NewUser::parse(
                u.username.clone(),
                u.first_name.clone(),
                u.last_name.clone(),
                u.email.clone(),
                u.phone.clone(),
                u.gender,
                &u.birth_date.to_string(),
            );
            assert!(again.is_ok(), "{:?}: {:?}", u.username, again);
            assert_eq!(u.gender.as_str(), d.gender);
        }
    }
}
